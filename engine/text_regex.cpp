#include "engine/text_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>
#include <stdexcept>

#include "engine/unicode_text.h"

namespace inflight::engine {

namespace {
pcre2_code* code_of(void* p) { return static_cast<pcre2_code*>(p); }
}  // namespace

TextRegex::TextRegex(const std::string& pattern) : pattern_(pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    throw std::invalid_argument("regex '" + pattern + "' does not compile at offset " + std::to_string(offset) +
                                ": " + reinterpret_cast<const char*>(message));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // NOTE: falls back to the interpreter where JIT is unavailable
  code_ = code;
}

TextRegex::TextRegex(TextRegex&& o) noexcept : pattern_(std::move(o.pattern_)), code_(o.code_) { o.code_ = nullptr; }
TextRegex& TextRegex::operator=(TextRegex&& o) noexcept {
  std::swap(pattern_, o.pattern_);
  std::swap(code_, o.code_);
  return *this;
}
TextRegex::~TextRegex() {
  if (code_) pcre2_code_free(code_of(code_));
}

std::vector<std::pair<size_t, size_t>> TextRegex::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> out;
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create_from_pattern(code_of(code_), nullptr), &pcre2_match_data_free);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start <= text.size()) {
    const int rc = pcre2_match(code_of(code_), subject, text.size(), start, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      throw std::runtime_error("regex '" + pattern_ + "': " + reinterpret_cast<const char*>(message));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const size_t begin = ov[0], end = ov[1];
    if (end > begin) {
      out.emplace_back(begin, end);
      start = end;
    } else {
      if (begin >= text.size()) break;
      start = begin + size_t(utf8_char_length(static_cast<unsigned char>(text[begin])));
    }
  }
  return out;
}

std::string regex_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

}  // namespace inflight::engine

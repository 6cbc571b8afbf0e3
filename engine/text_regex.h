// A compiled regular expression over UTF-8 text with Unicode properties (PCRE2 with UTF and UCP), as the
// tokenizers' split patterns need (\p{L}, \p{N}, (?i:...), look-ahead).
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace inflight::engine {

class TextRegex {
 public:
  // Throws std::invalid_argument naming the pattern and PCRE2's message when it does not compile.
  explicit TextRegex(const std::string& pattern);
  TextRegex(TextRegex&&) noexcept;
  TextRegex& operator=(TextRegex&&) noexcept;
  ~TextRegex();

  // Every non-overlapping match in `text` (valid UTF-8), as byte [begin, end) pairs, left to right; an
  // empty match advances by one character.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;
  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
};

// `s` with every regex metacharacter escaped, for a literal pattern.
std::string regex_escape(std::string_view s);

}  // namespace inflight::engine

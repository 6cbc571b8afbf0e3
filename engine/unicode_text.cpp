#include "engine/unicode_text.h"

#include <utf8proc.h>

#include <cstdlib>
#include <stdexcept>

namespace inflight::engine {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Bytes of a valid UTF-8 character at s[i], or 0 when s[i..] does not start one. `*maximal` is set to the
// length of the longest prefix that could still start a valid character (at least 1), the unit of repair.
size_t valid_char_at(std::string_view s, size_t i, size_t* maximal) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  *maximal = 1;
  if (c < 0x80) return 1;
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c == 0xE0) n = 3, lo = 0xA0;
  else if (c >= 0xE1 && c <= 0xEC) n = 3;
  else if (c == 0xED) n = 3, hi = 0x9F;  // no surrogates
  else if (c >= 0xEE && c <= 0xEF) n = 3;
  else if (c == 0xF0) n = 4, lo = 0x90;
  else if (c >= 0xF1 && c <= 0xF3) n = 4;
  else if (c == 0xF4) n = 4, hi = 0x8F;
  else return 0;
  for (size_t k = 1; k < n; ++k) {
    if (i + k >= s.size()) return 0;
    const unsigned char b = static_cast<unsigned char>(s[i + k]);
    const bool ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) return 0;
    *maximal = k + 1;
  }
  return n;
}

}  // namespace

int utf8_char_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xF0 && lead <= 0xF7) return 4;
  if (lead >= 0xE0) return lead <= 0xEF ? 3 : 1;
  if (lead >= 0xC0) return 2;
  return 1;
}

void append_utf8(std::string& out, char32_t cp) {
  utf8proc_uint8_t buf[4];
  const utf8proc_ssize_t n = utf8proc_encode_char(utf8proc_int32_t(cp), buf);
  out.append(reinterpret_cast<const char*>(buf), size_t(n));
}

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0, m; i < s.size();) {
    const size_t n = valid_char_at(s, i, &m);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string to_valid_utf8(std::string_view s) {
  if (is_valid_utf8(s)) return std::string(s);
  std::string out;
  out.reserve(s.size() + 8);
  for (size_t i = 0, maximal; i < s.size();) {
    const size_t n = valid_char_at(s, i, &maximal);
    if (n > 0) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out.append(kReplacement);
      i += maximal;
    }
  }
  return out;
}

std::string normalize_unicode(std::string_view text, NormalForm form) {
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::NFC: options |= UTF8PROC_COMPOSE; break;
    case NormalForm::NFD: options |= UTF8PROC_DECOMPOSE; break;
    case NormalForm::NFKC: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NormalForm::NFKD: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          utf8proc_ssize_t(text.size()), &out, utf8proc_option_t(options));
  if (n < 0) throw std::runtime_error(std::string("Unicode normalization failed: ") + utf8proc_errmsg(n));
  std::string result(reinterpret_cast<const char*>(out), size_t(n));
  std::free(out);
  return result;
}

std::string lowercase_unicode(std::string_view text) {
  // Character by character, as Hugging Face's Lowercase normalizer (Rust's char::to_lowercase): the simple
  // mapping, except U+0130, the one character whose lowercase is two code points (SpecialCasing.txt).
  std::string out;
  out.reserve(text.size());
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  const utf8proc_ssize_t size = utf8proc_ssize_t(text.size());
  for (utf8proc_ssize_t i = 0; i < size;) {
    utf8proc_int32_t cp = 0;
    const utf8proc_ssize_t n = utf8proc_iterate(p + i, size - i, &cp);
    if (n <= 0) throw std::runtime_error("lowercase: invalid UTF-8");
    i += n;
    if (cp == 0x130) out += "i\xCC\x87";  // i + U+0307 COMBINING DOT ABOVE
    else append_utf8(out, char32_t(utf8proc_tolower(cp)));
  }
  return out;
}

ByteLevelAlphabet::ByteLevelAlphabet() {
  from_cp_.fill(-1);
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    const char32_t cp = printable ? char32_t(b) : char32_t(next++);
    append_utf8(to_char_[size_t(b)], cp);
    from_cp_[cp] = int16_t(b);
  }
}

const ByteLevelAlphabet& ByteLevelAlphabet::get() {
  static const ByteLevelAlphabet alphabet;
  return alphabet;
}

std::string ByteLevelAlphabet::encode(std::string_view bytes) const {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += to_char_[static_cast<unsigned char>(c)];
  return out;
}

bool ByteLevelAlphabet::decode(std::string_view token, std::string* out) const {
  out->clear();
  for (size_t i = 0; i < token.size();) {
    const unsigned char c = static_cast<unsigned char>(token[i]);
    char32_t cp;
    if (c < 0x80) {
      cp = c, i += 1;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < token.size()) {
      cp = char32_t(c & 0x1F) << 6 | char32_t(token[i + 1] & 0x3F), i += 2;
    } else {
      return false;  // the alphabet has no code point past U+07FF
    }
    const int b = decode(cp);
    if (b < 0) return false;
    *out += char(b);
  }
  return true;
}

}  // namespace inflight::engine

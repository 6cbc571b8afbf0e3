// UTF-8 text helpers for the tokenizers: code point iteration, lossy repair of invalid bytes, Unicode
// normalization forms (utf8proc), and GPT-2's byte-level alphabet.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace inflight::engine {

// Length in bytes of the UTF-8 character starting with byte `lead` (1 for a stray continuation byte).
int utf8_char_length(unsigned char lead);
void append_utf8(std::string& out, char32_t cp);
// The text with every maximal invalid UTF-8 subsequence replaced by U+FFFD (WHATWG / Rust's
// from_utf8_lossy rule, what TextDecoder and Hugging Face tokenizers do).
std::string to_valid_utf8(std::string_view bytes);
bool is_valid_utf8(std::string_view bytes);

enum class NormalForm { NFC, NFD, NFKC, NFKD };
// `text` must be valid UTF-8. Throws std::runtime_error when utf8proc fails.
std::string normalize_unicode(std::string_view text, NormalForm form);
// Unicode lowercase of valid UTF-8 text, character by character (Hugging Face's Lowercase normalizer).
std::string lowercase_unicode(std::string_view text);

// GPT-2's byte-level alphabet: every byte as one printable code point (bytes 33-126, 161-172 and 174-255
// stand for themselves; the other 68 become U+0100 onwards in byte order).
class ByteLevelAlphabet {
 public:
  static const ByteLevelAlphabet& get();
  // The UTF-8 of byte b's code point.
  const std::string& encode(uint8_t b) const { return to_char_[b]; }
  std::string encode(std::string_view bytes) const;
  // The byte a code point stands for, or -1 when it is not in the alphabet.
  int decode(char32_t cp) const { return cp < from_cp_.size() ? from_cp_[cp] : -1; }
  // The bytes of a byte-level token; false (and `out` unspecified) when some character is not in the alphabet.
  bool decode(std::string_view token, std::string* out) const;

 private:
  ByteLevelAlphabet();
  std::array<std::string, 256> to_char_;
  std::array<int16_t, 324> from_cp_;  // code points < 0x144
};

}  // namespace inflight::engine

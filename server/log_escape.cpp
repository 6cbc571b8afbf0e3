#include "server/log_escape.h"

#include <cstdint>
#include <cstdio>

namespace inflight::server {

namespace {

// The length of the valid UTF-8 sequence at `s[i]` (2-4) and its code point, or 0 when invalid
// (truncated, a stray continuation byte, overlong, a surrogate, above U+10FFFF).
int utf8_sequence(std::string_view s, size_t i, uint32_t* cp) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char lead = b(0);
  int len;
  uint32_t min;
  if (lead >= 0xC2 && lead <= 0xDF) len = 2, min = 0x80, *cp = lead & 0x1F;
  else if (lead >= 0xE0 && lead <= 0xEF) len = 3, min = 0x800, *cp = lead & 0x0F;
  else if (lead >= 0xF0 && lead <= 0xF4) len = 4, min = 0x10000, *cp = lead & 0x07;
  else return 0;
  if (i + size_t(len) > s.size()) return 0;
  for (int k = 1; k < len; ++k) {
    if ((b(size_t(k)) & 0xC0) != 0x80) return 0;
    *cp = (*cp << 6) | (b(size_t(k)) & 0x3F);
  }
  if (*cp < min || *cp > 0x10FFFF || (*cp >= 0xD800 && *cp <= 0xDFFF)) return 0;
  return len;
}

bool acts_as_control(uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9F) || cp == 0x2028 || cp == 0x2029 || cp == 0x200E || cp == 0x200F ||
         (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
}

}  // namespace

std::string log_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  char buf[16];
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '\\' || c == '"') {
      out += '\\';
      out += char(c);
      ++i;
    } else if (c >= 0x20 && c < 0x7F) {
      out += char(c);
      ++i;
    } else if (c < 0x80) {  // ASCII controls and DEL
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
      ++i;
    } else {
      uint32_t cp = 0;
      const int len = utf8_sequence(text, i, &cp);
      if (len == 0) {
        std::snprintf(buf, sizeof buf, "\\x%02X", c);
        out += buf;
        ++i;
      } else if (acts_as_control(cp)) {
        std::snprintf(buf, sizeof buf, "\\u{%04X}", unsigned(cp));
        out += buf;
        i += size_t(len);
      } else {
        out.append(text.substr(i, size_t(len)));
        i += size_t(len);
      }
    }
  }
  return out;
}

}  // namespace inflight::server

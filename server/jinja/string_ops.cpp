#include "server/jinja/string_ops.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "server/jinja/builtins.h"

namespace inflight::server::jinja {

namespace {

// Python's str.isspace() code points.
bool space_code_point(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// The code point of the UTF-8 sequence of `n` bytes at s[i], or -1 when those bytes are not one.
int64_t decode_at(const std::string& s, size_t i, size_t n) {
  if (i + n > s.size()) return -1;
  const unsigned char c = static_cast<unsigned char>(s[i]);
  const size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (len != n) return -1;
  uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (size_t k = 1; k < n; ++k) {
    const unsigned char d = static_cast<unsigned char>(s[i + k]);
    if ((d & 0xC0) != 0x80) return -1;
    cp = (cp << 6) | (d & 0x3F);
  }
  return cp;
}

// Bytes of the whitespace character starting at s[i] (0: none there).
size_t space_at(const std::string& s, size_t i) {
  for (size_t n = 1; n <= 3; ++n) {
    const int64_t cp = decode_at(s, i, n);
    if (cp >= 0) return space_code_point(uint32_t(cp)) ? n : 0;
  }
  return 0;
}

// Bytes of the whitespace character ending just before s[e] (0: none there).
size_t space_before(const std::string& s, size_t e) {
  for (size_t n = 1; n <= 3 && n <= e; ++n) {
    const int64_t cp = decode_at(s, e - n, n);
    if (cp >= 0) return space_code_point(uint32_t(cp)) ? n : 0;
  }
  return 0;
}


// Moves b forward over whitespace and e back over whitespace, within [b, e).
void skip_spaces(const std::string& s, size_t& b, size_t& e, bool left, bool right) {
  if (left)
    for (size_t n; b < e && (n = space_at(s, b)) != 0;) b += n;
  if (right)
    for (size_t n; e > b && (n = space_before(s, e)) != 0 && e - n >= b;) e -= n;
}
char up(char c) { return char(std::toupper(static_cast<unsigned char>(c))); }
char low(char c) { return char(std::tolower(static_cast<unsigned char>(c))); }
bool alpha(char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; }

// Formats one value by a format spec: [[fill]align][sign][0][width][,][.precision][type].
std::string apply_spec(const Value& v, const std::string& spec) {
  if (spec.empty()) return v.str();
  size_t i = 0;
  char fill = ' ', align = 0;
  if (spec.size() >= 2 && std::string_view("<>^=").find(spec[1]) != std::string_view::npos) {
    fill = spec[0], align = spec[1], i = 2;
  } else if (std::string_view("<>^=").find(spec[0]) != std::string_view::npos) {
    align = spec[0], i = 1;
  }
  char sign = '-';
  if (i < spec.size() && (spec[i] == '+' || spec[i] == '-' || spec[i] == ' ')) sign = spec[i++];
  if (i < spec.size() && spec[i] == '0') {
    if (!align) fill = '0', align = '=';
    ++i;
  }
  auto digits = [&] {
    const size_t start = i;
    while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i]))) ++i;
    return std::string_view(spec).substr(start, i - start);
  };
  const size_t width = size_t(decimal_count(digits(), "format width"));
  int precision = -1;
  if (i < spec.size() && spec[i] == '.') {
    ++i;
    precision = int(decimal_count(digits(), "format precision"));
  }
  const char type = i < spec.size() ? spec[i] : 0;
  std::string body;
  const bool number = v.is_number() || v.is_bool();
  if (type == 'f' || type == 'F' || type == 'e' || type == 'E' || type == '%' || (type == 0 && v.is_float() && precision >= 0)) {
    if (!number) throw_render_error("format code '" + std::string(1, type) + "' needs a number, got " + v.type_name());
    const double x = v.as_number() * (type == '%' ? 100.0 : 1.0);
    char buf[512];
    const char conv = type == 0 || type == '%' ? 'f' : type;
    const std::string fmt = "%." + std::to_string(precision < 0 ? 6 : precision) + conv;
    std::snprintf(buf, sizeof buf, fmt.c_str(), x);
    body = buf;
    if (type == '%') body += '%';
  } else if (type == 'd') {
    if (!v.is_int() && !v.is_bool()) throw_render_error(std::string("format code 'd' needs an integer, got ") + v.type_name());
    body = std::to_string(v.is_bool() ? int64_t(v.as_bool()) : v.as_int());
  } else {
    body = v.str();
    if (precision >= 0 && v.is_string()) {
      const std::vector<std::string> chars = utf8_chars(body);
      body.clear();
      for (size_t k = 0; k < chars.size() && k < size_t(precision); ++k) body += chars[k];
    }
  }
  if (number && sign != '-' && !body.empty() && body[0] != '-') body.insert(body.begin(), sign);
  const size_t len = utf8_length(body);
  if (len >= width) return body;
  const size_t padding = width - len;
  if (!align) align = number ? '>' : '<';
  switch (align) {
    case '<': return body + std::string(padding, fill);
    case '^': return std::string(padding / 2, fill) + body + std::string(padding - padding / 2, fill);
    case '=':
      if (!body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' '))
        return body.substr(0, 1) + std::string(padding, fill) + body.substr(1);
      return std::string(padding, fill) + body;
    default: return std::string(padding, fill) + body;
  }
}

}  // namespace

std::string strip(const std::string& s, const std::string* chars, bool left, bool right) {
  if (chars == nullptr) {
    size_t b = 0, e = s.size();
    skip_spaces(s, b, e, left, right);
    return s.substr(b, e - b);
  }
  const std::vector<std::string> set = utf8_chars(*chars);
  const std::vector<std::string> cs = utf8_chars(s);
  auto in_set = [&](const std::string& c) { return std::find(set.begin(), set.end(), c) != set.end(); };
  size_t b = 0, e = cs.size();
  if (left)
    while (b < e && in_set(cs[b])) ++b;
  if (right)
    while (e > b && in_set(cs[e - 1])) --e;
  std::string out;
  for (size_t i = b; i < e; ++i) out += cs[i];
  return out;
}

std::string to_upper(const std::string& s) {
  std::string out = s;
  std::transform(out.begin(), out.end(), out.begin(), up);
  return out;
}

std::string to_lower(const std::string& s) {
  std::string out = s;
  std::transform(out.begin(), out.end(), out.begin(), low);
  return out;
}

std::string to_title(const std::string& s) {
  std::string out = s;
  bool prev_cased = false;
  for (char& c : out) {
    if (alpha(c)) {
      c = prev_cased ? low(c) : up(c);
      prev_cased = true;
    } else {
      prev_cased = false;
    }
  }
  return out;
}

std::string capitalize(const std::string& s) {
  std::string out = to_lower(s);
  if (!out.empty()) out[0] = up(out[0]);
  return out;
}

std::string swap_case(const std::string& s) {
  std::string out = s;
  for (char& c : out) c = std::isupper(static_cast<unsigned char>(c)) ? low(c) : up(c);
  return out;
}

std::vector<std::string> split(const std::string& s, const std::string* sep, int64_t maxsplit, bool from_right) {
  std::vector<std::string> out;
  if (sep != nullptr && sep->empty()) throw_render_error("empty separator");
  if (!from_right) {
    if (sep == nullptr) {
      size_t i = 0;
      while (true) {
        size_t end = s.size();
        skip_spaces(s, i, end, true, false);
        if (i >= s.size()) break;
        if (maxsplit >= 0 && int64_t(out.size()) == maxsplit) {
          skip_spaces(s, i, end, false, true);
          out.push_back(s.substr(i, end - i));
          break;
        }
        size_t j = i;
        while (j < s.size() && space_at(s, j) == 0) ++j;
        out.push_back(s.substr(i, j - i));
        i = j;
      }
      return out;
    }
    size_t start = 0;
    while (true) {
      const size_t p = (maxsplit >= 0 && int64_t(out.size()) == maxsplit) ? std::string::npos : s.find(*sep, start);
      if (p == std::string::npos) {
        out.push_back(s.substr(start));
        return out;
      }
      out.push_back(s.substr(start, p - start));
      start = p + sep->size();
    }
  }
  // rsplit: split from the end, then restore the order.
  if (sep == nullptr) {
    size_t e = s.size();
    while (true) {
      size_t zero = 0;
      skip_spaces(s, zero, e, false, true);
      if (e == 0) break;
      if (maxsplit >= 0 && int64_t(out.size()) == maxsplit) {
        size_t b = 0;
        skip_spaces(s, b, e, true, false);
        out.push_back(s.substr(b, e - b));
        break;
      }
      size_t b = e;
      while (b > 0 && space_before(s, b) == 0) --b;
      out.push_back(s.substr(b, e - b));
      e = b;
    }
  } else {
    size_t end = s.size();
    while (true) {
      const size_t p = (maxsplit >= 0 && int64_t(out.size()) == maxsplit) || end < sep->size()
                           ? std::string::npos
                           : s.rfind(*sep, end - sep->size());
      if (p == std::string::npos) {
        out.push_back(s.substr(0, end));
        break;
      }
      out.push_back(s.substr(p + sep->size(), end - p - sep->size()));
      end = p;
    }
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\n' && s[i] != '\r') continue;
    out.push_back(s.substr(start, i - start));
    if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
    start = i + 1;
  }
  if (start < s.size()) out.push_back(s.substr(start));
  return out;
}

std::string replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  if (from.empty()) {
    int64_t n = 0;
    for (const std::string& c : utf8_chars(s)) {
      if (count < 0 || n < count) out += to, ++n;
      out += c;
    }
    if (count < 0 || n < count) out += to;
    return out;
  }
  size_t start = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    const size_t p = s.find(from, start);
    if (p == std::string::npos) break;
    out.append(s, start, p - start);
    out += to;
    start = p + from.size();
    ++n;
  }
  out.append(s, start, std::string::npos);
  return out;
}

int64_t count_substring(const std::string& s, const std::string& sub) {
  if (sub.empty()) return int64_t(utf8_length(s)) + 1;
  int64_t n = 0;
  for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
  return n;
}

bool char_class_test(const std::string& s, const std::string& which) {
  if (s.empty()) return false;
  auto all = [&](auto pred) { return std::all_of(s.begin(), s.end(), [&](char c) { return pred(static_cast<unsigned char>(c)) != 0; }); };
  if (which == "isdigit" || which == "isnumeric" || which == "isdecimal") return all(::isdigit);
  if (which == "isalpha") return all(::isalpha);
  if (which == "isalnum") return all(::isalnum);
  if (which == "isspace") {
    size_t b = 0, e = s.size();
    skip_spaces(s, b, e, true, false);
    return b == s.size();
  }
  const bool has_cased = std::any_of(s.begin(), s.end(), alpha);
  if (which == "islower") return has_cased && !std::any_of(s.begin(), s.end(), [](char c) { return std::isupper(static_cast<unsigned char>(c)); });
  if (which == "isupper") return has_cased && !std::any_of(s.begin(), s.end(), [](char c) { return std::islower(static_cast<unsigned char>(c)); });
  return false;
}

int64_t decimal_count(std::string_view digits, const char* what) {
  int64_t v = 0;
  for (char c : digits) {
    v = v * 10 + (c - '0');
    if (v > kMaxFormatCount) throw_render_error(std::string(what) + " too large: " + std::string(digits.substr(0, 24)));
  }
  return v;
}

int64_t truncate_to_int(double d, const char* what) {
  if (!fits_int64(d))
    throw_render_error(std::string(what) + ": " + Value(d).str() + " is out of range");
  return int64_t(d);
}

std::string pad(const std::string& s, int64_t width, const std::string& how, const std::string& fill) {
  if (width > kMaxFormatCount) throw_render_error(how + ": width too large: " + std::to_string(width));
  const int64_t len = int64_t(utf8_length(s));
  if (width <= len) return s;
  const size_t n = size_t(width - len);
  auto fills = [&](size_t k) {
    std::string out;
    for (size_t i = 0; i < k; ++i) out += how == "zfill" ? "0" : fill;
    return out;
  };
  if (how == "ljust") return s + fills(n);
  if (how == "rjust") return fills(n) + s;
  if (how == "zfill") {
    if (!s.empty() && (s[0] == '-' || s[0] == '+')) return s.substr(0, 1) + fills(n) + s.substr(1);
    return fills(n) + s;
  }
  // center: Python puts the odd extra on the left when the width is odd and the length even... it
  // computes left = n / 2 + (n & width & 1).
  const size_t left = n / 2 + (n & size_t(width) & 1);
  return fills(left) + s + fills(n - left);
}

std::string python_format(const std::string& format, const Args& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < format.size(); ++i) {
    const char c = format[i];
    if (c == '}') {
      if (i + 1 < format.size() && format[i + 1] == '}') ++i;
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < format.size() && format[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const size_t close = format.find('}', i);
    if (close == std::string::npos) throw_render_error("str.format: single '{' encountered in format string");
    std::string field = format.substr(i + 1, close - i - 1);
    i = close;
    std::string spec;
    if (const size_t colon = field.find(':'); colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field.erase(colon);
    }
    if (const size_t bang = field.find('!'); bang != std::string::npos) field.erase(bang);  // conversions: as str
    size_t end = 0;
    while (end < field.size() && field[end] != '.' && field[end] != '[') ++end;
    const std::string head = field.substr(0, end);
    Value v;
    if (head.empty()) {
      if (auto_index >= args.positional.size()) throw_render_error("str.format: not enough arguments");
      v = args.positional[auto_index++];
    } else if (std::all_of(head.begin(), head.end(), [](char d) { return std::isdigit(static_cast<unsigned char>(d)); })) {
      const size_t k = std::stoul(head);
      if (k >= args.positional.size()) throw_render_error("str.format: argument index " + head + " out of range");
      v = args.positional[k];
    } else {
      const Value* kw = nullptr;
      for (const auto& [name, value] : args.keyword)
        if (name == head) kw = &value;
      if (kw == nullptr) throw_render_error("str.format: no argument named '" + head + "'");
      v = *kw;
    }
    // .attr and [key] after the head
    for (size_t p = end; p < field.size();) {
      if (field[p] == '.') {
        size_t q = p + 1;
        while (q < field.size() && field[q] != '.' && field[q] != '[') ++q;
        v = get_attr(v, field.substr(p + 1, q - p - 1));
        p = q;
      } else {
        const size_t q = field.find(']', p);
        if (q == std::string::npos) throw_render_error("str.format: missing ']' in a field");
        const std::string key = field.substr(p + 1, q - p - 1);
        const bool digits = !key.empty() && std::all_of(key.begin(), key.end(), [](char d) { return std::isdigit(static_cast<unsigned char>(d)); });
        v = get_item(v, digits ? Value(decimal_count(key, "str.format index")) : Value(key));
        p = q + 1;
      }
    }
    out += apply_spec(v, spec);
  }
  return out;
}

std::string percent_format(const std::string& format, const Value& args) {
  const Array values = args.is_array() ? args.as_array() : Array{args};
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    if (i + 1 < format.size() && format[i + 1] == '%') {
      out += '%';
      ++i;
      continue;
    }
    // %[key][flags][width][.precision]type
    size_t j = i + 1;
    Value v;
    bool keyed = false;
    if (j < format.size() && format[j] == '(') {
      const size_t close = format.find(')', j);
      if (close == std::string::npos || !args.is_object()) throw_render_error("format requires a mapping");
      v = get_item(args, Value(format.substr(j + 1, close - j - 1)));
      keyed = true;
      j = close + 1;
    }
    std::string flags;
    while (j < format.size() && std::string_view("-+ 0#").find(format[j]) != std::string_view::npos) flags += format[j++];
    std::string width, precision;
    while (j < format.size() && std::isdigit(static_cast<unsigned char>(format[j]))) width += format[j++];
    if (j < format.size() && format[j] == '.') {
      ++j;
      precision = "0";
      while (j < format.size() && std::isdigit(static_cast<unsigned char>(format[j]))) precision += format[j++];
    }
    if (j >= format.size()) throw_render_error("incomplete format");
    const char type = format[j];
    i = j;
    if (!keyed) {
      if (next >= values.size()) throw_render_error("not enough arguments for format string");
      v = values[next++];
    }
    std::string spec;
    const char align = flags.find('-') != std::string::npos ? '<' : 0;
    if (align) spec += align;
    if (flags.find('+') != std::string::npos) spec += '+';
    else if (flags.find(' ') != std::string::npos) spec += ' ';
    if (flags.find('0') != std::string::npos && !align) spec += '0';
    spec += width;
    if (!precision.empty()) spec += "." + std::to_string(decimal_count(precision, "format precision"));
    switch (type) {
      case 's': out += apply_spec(Value(v.str()), spec); break;
      case 'r': out += apply_spec(Value(v.repr()), spec); break;
      case 'd':
      case 'i':
        out += apply_spec(v.is_float() ? Value(truncate_to_int(v.as_float(), "%d format")) : v, spec + "d");
        break;
      case 'f':
      case 'F':
      case 'e':
      case 'E': out += apply_spec(v, spec + type); break;
      case 'x':
      case 'X': {
        char buf[32];
        std::snprintf(buf, sizeof buf, type == 'x' ? "%llx" : "%llX", static_cast<long long>(v.is_int() ? v.as_int() : 0));
        out += apply_spec(Value(std::string(buf)), spec);
        break;
      }
      default: throw_render_error(std::string("unsupported format character '") + type + "'");
    }
  }
  if (!args.is_object() && next < values.size()) throw_render_error("not all arguments converted during string formatting");
  return out;
}

std::string indent_lines(const std::string& s, const std::string& prefix, bool first, bool blank) {
  std::string out;
  size_t start = 0;
  bool is_first = true;
  while (start <= s.size()) {
    size_t nl = s.find('\n', start);
    const bool last = nl == std::string::npos;
    if (last) nl = s.size();
    const std::string line = s.substr(start, nl - start);
    const bool add = (is_first ? first : true) && (blank || !strip(line, nullptr, true, true).empty());
    if (add) out += prefix;
    out += line;
    if (last) break;
    out += '\n';
    start = nl + 1;
    is_first = false;
  }
  return out;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace inflight::server::jinja

#include "engine/grammar/regex.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <map>
#include <cstdio>
#include <vector>

namespace inflight::engine::grammar {
namespace {

using Set = std::vector<CodePointRange>;  // sorted, disjoint, merged once normalize()d

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

Set normalize(Set s) {
  std::sort(s.begin(), s.end(), [](const CodePointRange& a, const CodePointRange& b) { return a.first < b.first; });
  Set out;
  for (const CodePointRange& r : s) {
    if (!out.empty() && r.first <= out.back().last + 1) {
      out.back().last = std::max(out.back().last, r.last);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

Set complement(const Set& s) {
  Set out;
  uint32_t next = 0;
  for (const CodePointRange& r : s) {
    if (r.first > next) out.push_back({next, r.first - 1});
    next = r.last + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return out;
}

Set intersect(const Set& a, const Set& b) {
  Set out;
  for (const CodePointRange& x : a) {
    for (const CodePointRange& y : b) {
      const uint32_t lo = std::max(x.first, y.first), hi = std::min(x.last, y.last);
      if (lo <= hi) out.push_back({lo, hi});
    }
  }
  return normalize(out);
}

bool contains(const Set& s, uint32_t cp) {
  return std::any_of(s.begin(), s.end(), [cp](const CodePointRange& r) { return r.first <= cp && cp <= r.last; });
}

// The class escapes' sets, built on first use (function statics: a grammar compiled during another file's static
// initialisation must not see them empty).
const Set& digit_set() {
  static const Set s = {{'0', '9'}};
  return s;
}
const Set& word_set() {
  static const Set s = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
  return s;
}
// ECMAScript's WhiteSpace and LineTerminator code points.
const Set& space_set() {
  static const Set s = normalize({{0x09, 0x0D}, {0x20, 0x20}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
                                  {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000},
                                  {0xFEFF, 0xFEFF}});
  return s;
}
// `.`: everything but the line terminators.
const Set& dot_set() {
  static const Set s = complement(normalize({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}));
  return s;
}

// The text of a JSON string's inside that spells one code point of `s`: the character itself where JSON allows it
// raw, else its escape (the short forms, \u00XX for the other controls; `/` also as \/).
std::string json_chars(const Set& s) {
  static const Set kRaw = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, kMaxCodePoint}};
  std::vector<std::string> parts;
  const Set raw = intersect(s, kRaw);
  if (!raw.empty()) parts.push_back(gbnf_class(raw));
  if (contains(s, '"')) parts.push_back(gbnf_literal("\\\""));
  if (contains(s, '\\')) parts.push_back(gbnf_literal("\\\\"));
  if (contains(s, '/')) parts.push_back(gbnf_literal("\\/"));
  const Set controls = intersect(s, {{0, 0x1F}});
  if (controls.size() == 1 && controls[0].first == 0 && controls[0].last == 0x1F) {
    parts.push_back("(\"\\\\\" ( [bfnrt] | \"u00\" [01] [0-9a-fA-F] ))");
  } else {
    for (const CodePointRange& r : controls) {
      for (uint32_t c = r.first; c <= r.last; ++c) {
        const char* short_form = c == 8 ? "\\b" : c == 12 ? "\\f" : c == 10 ? "\\n" : c == 13 ? "\\r" : c == 9 ? "\\t"
                                                                                                              : nullptr;
        if (short_form != nullptr) {
          parts.push_back(gbnf_literal(short_form));
          continue;
        }
        static const char* kHex = "0123456789abcdef";
        std::string p = gbnf_literal(std::string("\\u00") + static_cast<char>('0' + (c >> 4)));
        const char low = kHex[c & 15];
        if (low >= 'a') {
          p += " [";
          p += low;
          p += static_cast<char>(low - 'a' + 'A');
          p += ']';
        } else {
          p.insert(p.size() - 1, 1, low);
        }
        parts.push_back("(" + p + ")");
      }
    }
  }
  if (parts.size() == 1) return parts[0];
  std::string out = "(";
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? " | " : " ") + parts[i];
  return out + " )";
}

// A parsed piece of the pattern as GBNF, and whether it can match the empty string (text "" matches only it).
struct Piece {
  std::string text;
  bool nullable;
};

class RegexCompiler {
 public:
  RegexCompiler(std::string_view pattern, const RegexOptions& options) : p_(pattern), options_(options) {}

  std::string compile() {
    decode_utf8(p_, "regex");  // rejects invalid UTF-8 up front, so the reads below can trust it
    std::vector<std::string> alternatives;
    while (true) {
      bool anchored_start = false, anchored_end = false;
      std::string seq = parse_sequence(true, &anchored_start, &anchored_end).text;
      if (options_.search) {
        const std::string any = options_.json_string ? any_rule() + "*" : ".*";
        if (!anchored_start) seq = seq.empty() ? any : any + " " + seq;
        if (!anchored_end && !(seq.size() >= any.size() && seq.compare(seq.size() - any.size(), any.size(), any) == 0)) {
          seq = seq.empty() ? any : seq + " " + any;
        }
      }
      alternatives.push_back(seq);
      if (pos_ >= p_.size()) break;
      if (p_[pos_] == ')') fail("unmatched ')'");
      ++pos_;  // '|'
    }
    const std::string body = gbnf_alternation(alternatives);
    std::string out = options_.root + " ::= " + (body.empty() ? "\"\"" : body) + "\n";
    for (const std::string& r : helper_rules_) out += r;
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw GrammarError("regex: " + what + " at offset " + std::to_string(pos_));
  }

  std::string any_rule() {
    const std::string name = options_.rule_prefix + "-char";
    if (!any_defined_) {
      any_defined_ = true;
      helper_rules_.push_back(name + " ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n");
    }
    return name;
  }

  std::string chars(const Set& s) {
    if (s.empty()) fail("a character class that matches nothing");
    if (options_.json_string) return json_chars(s);
    if (s.size() == 1 && s[0].first == s[0].last) {
      std::string text;
      append_utf8(text, s[0].first);
      return gbnf_literal(text);
    }
    return gbnf_class(s);
  }

  uint32_t next_code_point() {
    const size_t len = std::min<size_t>(4, p_.size() - pos_);
    const auto b0 = static_cast<unsigned char>(p_[pos_]);
    const size_t n = b0 < 0x80 ? 1 : (b0 & 0xE0) == 0xC0 ? 2 : (b0 & 0xF0) == 0xE0 ? 3 : 4;
    const uint32_t cp = decode_utf8(p_.substr(pos_, std::min(n, len)), "regex")[0];
    pos_ += n;
    return cp;
  }

  // Top-level sequences may start with `^` and end with `$`; anchors anywhere else are refused.
  Piece parse_sequence(bool top, bool* anchored_start, bool* anchored_end) {
    std::vector<std::string> items;
    bool nullable = true;
    if (top && pos_ < p_.size() && p_[pos_] == '^') {
      *anchored_start = true;
      ++pos_;
    }
    while (pos_ < p_.size() && p_[pos_] != '|' && p_[pos_] != ')') {
      if (p_[pos_] == '$') {
        const bool at_end = pos_ + 1 == p_.size() || p_[pos_ + 1] == '|' || p_[pos_ + 1] == ')';
        if (!top || !at_end || (pos_ + 1 < p_.size() && p_[pos_ + 1] == ')')) fail("anchor '$' inside the pattern is not supported");
        *anchored_end = true;
        ++pos_;
        break;
      }
      if (p_[pos_] == '^') fail("anchor '^' inside the pattern is not supported");
      Piece atom = parse_quantified();
      nullable = nullable && atom.nullable;
      if (!atom.text.empty()) items.push_back(std::move(atom.text));
    }
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) out += (i ? " " : "") + items[i];
    return {out, nullable};
  }

  bool quantifier_braces(size_t at, int* min, int* max) const {
    // `{m}`, `{m,}` or `{m,n}` at `at`; max -1 is unbounded. Anything else is not a quantifier.
    size_t i = at + 1;
    auto number = [&](int* out) {
      const size_t start = i;
      long long v = 0;
      while (i < p_.size() && p_[i] >= '0' && p_[i] <= '9') {
        v = std::min<long long>(v * 10 + (p_[i] - '0'), 1LL << 40);
        ++i;
      }
      *out = static_cast<int>(std::min<long long>(v, 1LL << 30));
      return i > start;
    };
    if (!number(min)) return false;
    *max = *min;
    if (i < p_.size() && p_[i] == ',') {
      ++i;
      if (!number(max)) *max = -1;
    }
    return i < p_.size() && p_[i] == '}';
  }

  Piece parse_quantified() {
    const Piece piece = parse_atom();
    const std::string& atom = piece.text;
    if (pos_ >= p_.size()) return piece;
    int min = 1, max = 1;
    const char c = p_[pos_];
    if (c == '*') {
      min = 0, max = -1;
      ++pos_;
    } else if (c == '+') {
      min = 1, max = -1;
      ++pos_;
    } else if (c == '?') {
      min = 0, max = 1;
      ++pos_;
    } else if (c == '{' && quantifier_braces(pos_, &min, &max)) {
      pos_ = p_.find('}', pos_) + 1;
      if (max != -1 && min > max) fail("quantifier {m,n} with m > n");
      if (min > options_.max_repetition || max > options_.max_repetition) {
        fail("repetition count above " + std::to_string(options_.max_repetition));
      }
    } else {
      return piece;
    }
    if (pos_ < p_.size() && p_[pos_] == '?') ++pos_;  // lazy: the same language
    if (pos_ < p_.size() && (p_[pos_] == '*' || p_[pos_] == '+' || p_[pos_] == '?' ||
                             (p_[pos_] == '{' && quantifier_braces(pos_, &min, &max)))) {
      fail("nothing to repeat");
    }
    // NOTE: GBNF cannot loop on a part that matches nothing (parse_gbnf refuses it as left recursion).
    if (piece.nullable && max == -1 && !atom.empty()) {
      fail("a repetition of something that can match the empty string is not supported");
    }
    const bool nullable = piece.nullable || min == 0;
    if (atom.empty() || max == 0) return {"", true};
    if (min == 0 && max == -1) return {atom + "*", nullable};
    if (min == 1 && max == -1) return {atom + "+", nullable};
    if (min == 0 && max == 1) return {atom + "?", nullable};
    if (min == 1 && max == 1) return piece;
    if (max == -1) return {atom + "{" + std::to_string(min) + ",}", nullable};
    if (min == max) return {atom + "{" + std::to_string(min) + "}", nullable};
    return {atom + "{" + std::to_string(min) + "," + std::to_string(max) + "}", nullable};
  }

  // One atom as a GBNF primary (a literal, a class, a rule or a parenthesised group), or "" for the empty string.
  Piece parse_atom() {
    const char c = p_[pos_];
    if (c == '(') {
      // NOTE: the parser recurses once per group; the bound keeps deep nesting an error, not a stack overflow.
      if (++group_depth_ > kMaxGroupDepth) fail("groups nested deeper than " + std::to_string(kMaxGroupDepth));
      ++pos_;
      if (p_.substr(pos_, 1) == "?") {
        if (p_.substr(pos_, 2) == "?:") {
          pos_ += 2;
        } else if (p_.substr(pos_, 2) == "?=" || p_.substr(pos_, 2) == "?!" || p_.substr(pos_, 3) == "?<=" ||
                   p_.substr(pos_, 3) == "?<!") {
          --pos_;
          fail("lookaround assertion is not supported");
        } else if (p_.substr(pos_, 2) == "?<") {
          const size_t close = p_.find('>', pos_);
          if (close == std::string_view::npos) fail("unterminated group name");
          pos_ = close + 1;
        } else {
          fail("unsupported group modifier '(?'");
        }
      }
      std::vector<std::string> alternatives;
      bool nullable = false;
      while (true) {
        bool unused_start = false, unused_end = false;
        Piece alternative = parse_sequence(false, &unused_start, &unused_end);
        nullable = nullable || alternative.nullable;
        alternatives.push_back(std::move(alternative.text));
        if (pos_ >= p_.size()) fail("missing ')'");
        if (p_[pos_] == ')') break;
        ++pos_;  // '|'
      }
      ++pos_;
      --group_depth_;
      const std::string body = gbnf_alternation(alternatives);
      return {body.empty() ? body : "(" + body + ")", nullable};  // a primary, whatever the body's shape
    }
    if (c == '[') return {parse_class(), false};
    if (c == '.') {
      ++pos_;
      return {chars(dot_set()), false};
    }
    if (c == '\\') return {chars(parse_escape(false)), false};
    if (c == '*' || c == '+' || c == '?') fail("nothing to repeat");
    int min = 0, max = 0;
    if (c == '{' && quantifier_braces(pos_, &min, &max)) fail("nothing to repeat");
    const uint32_t cp = next_code_point();
    return {chars({{cp, cp}}), false};
  }

  // After a `\` (at pos_): the set it stands for. In a class, \b is the backspace; outside, a word boundary.
  Set parse_escape(bool in_class) {
    const size_t start = pos_;
    ++pos_;
    if (pos_ >= p_.size()) fail("'\\' at the end of the pattern");
    const char c = p_[pos_++];
    auto one = [](uint32_t cp) { return Set{{cp, cp}}; };
    auto hex = [&](size_t digits) {
      uint32_t v = 0;
      for (size_t k = 0; k < digits; ++k) {
        if (pos_ >= p_.size() || !std::isxdigit(static_cast<unsigned char>(p_[pos_]))) {
          pos_ = start;
          fail("malformed hexadecimal escape");
        }
        const char h = p_[pos_++];
        v = v * 16 + static_cast<uint32_t>(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
      }
      return v;
    };
    switch (c) {
      case 'd': return digit_set();
      case 'D': return complement(digit_set());
      case 'w': return word_set();
      case 'W': return complement(word_set());
      case 's': return space_set();
      case 'S': return complement(space_set());
      case 'n': return one('\n');
      case 't': return one('\t');
      case 'r': return one('\r');
      case 'v': return one('\v');
      case 'f': return one('\f');
      case 'x': return one(hex(2));
      case 'u': {
        if (pos_ < p_.size() && p_[pos_] == '{') {
          ++pos_;
          uint32_t v = 0;
          size_t n = 0;
          while (pos_ < p_.size() && std::isxdigit(static_cast<unsigned char>(p_[pos_])) && n < 8) v = v * 16 + hex(1), ++n;
          if (n == 0 || pos_ >= p_.size() || p_[pos_] != '}' || v > kMaxCodePoint) {
            pos_ = start;
            fail("malformed \\u{...} escape");
          }
          ++pos_;
          return one(v);
        }
        return one(hex(4));
      }
      case 'c': {
        if (pos_ < p_.size() && std::isalpha(static_cast<unsigned char>(p_[pos_]))) return one(p_[pos_++] % 32);
        pos_ = start;
        fail("malformed \\c escape");
      }
      case '0':
        if (pos_ < p_.size() && std::isdigit(static_cast<unsigned char>(p_[pos_]))) {
          pos_ = start;
          fail("octal escape is not supported");
        }
        return one(0);
      case 'b':
        if (in_class) return one('\b');
        pos_ = start;
        fail("word boundary \\b is not supported");
      case 'B':
        pos_ = start;
        fail("word boundary \\B is not supported");
      case 'k':
        pos_ = start;
        fail("backreference \\k<name> is not supported");
      case 'p':
      case 'P':
        pos_ = start;
        fail("Unicode property escape \\p{...} is not supported");
      default: break;
    }
    if (c >= '1' && c <= '9') {
      pos_ = start;
      fail(std::string("backreference \\") + c + " is not supported");
    }
    if (std::isalnum(static_cast<unsigned char>(c))) {
      pos_ = start;
      fail(std::string("unknown escape \\") + c);
    }
    --pos_;
    return one(next_code_point());  // an escaped non-alphanumeric character is itself
  }

  Set class_atom() {
    if (p_[pos_] == '\\') return parse_escape(true);
    const uint32_t cp = next_code_point();
    return {{cp, cp}};
  }

  std::string parse_class() {
    const size_t start = pos_;
    ++pos_;
    bool negate = false;
    if (pos_ < p_.size() && p_[pos_] == '^') negate = true, ++pos_;
    Set s;
    while (true) {
      if (pos_ >= p_.size()) {
        pos_ = start;
        fail("missing ']'");
      }
      if (p_[pos_] == ']') break;
      const Set first = class_atom();
      const bool single = first.size() == 1 && first[0].first == first[0].last;
      if (single && pos_ + 1 < p_.size() && p_[pos_] == '-' && p_[pos_ + 1] != ']') {
        const size_t dash = pos_;
        ++pos_;
        const Set last = class_atom();
        if (last.size() != 1 || last[0].first != last[0].last) {
          pos_ = dash;
          fail("a class escape as a range's end");
        }
        if (last[0].first < first[0].first) {
          pos_ = dash;
          fail("range out of order in character class");
        }
        s.push_back({first[0].first, last[0].first});
      } else {
        s.insert(s.end(), first.begin(), first.end());
      }
    }
    ++pos_;
    s = normalize(s);
    if (negate) s = complement(s);
    if (s.empty()) {
      pos_ = start;
      fail("a character class that matches nothing");
    }
    return chars(s);
  }

  std::string_view p_;
  const RegexOptions& options_;
  static constexpr int kMaxGroupDepth = 256;
  size_t pos_ = 0;
  int group_depth_ = 0;
  bool any_defined_ = false;
  std::vector<std::string> helper_rules_;
};

}  // namespace

std::string regex_to_gbnf(std::string_view pattern, const RegexOptions& options) {
  return RegexCompiler(pattern, options).compile();
}

}  // namespace inflight::engine::grammar

// ---- Decimal number ranges ----------------------------------------------------------------------------------
namespace inflight::engine::grammar {
namespace {

constexpr uint64_t kInfinite = UINT64_MAX;  // an upper end of "no bound"

std::string seq_of(const std::string& a, const std::string& b) { return a.empty() ? b : b.empty() ? a : a + " " + b; }

std::string fixed_shortest(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed);
  return std::string(buf, r.ptr);
}

int num_digits(uint64_t v) {
  int n = 1;
  while (v >= 10) v /= 10, ++n;
  return n;
}

std::string digit_class(char lo, char hi) {
  if (lo == hi) return std::string("\"") + lo + "\"";
  if (lo == '0' && hi == '9') return "[0-9]";
  return std::string("[") + lo + (hi > lo + 1 ? "-" : "") + hi + "]";
}

std::string any_digits(size_t n) {
  return n == 0 ? "" : n == 1 ? "[0-9]" : "[0-9]{" + std::to_string(n) + "}";
}

// Digit strings of x's length between x and y inclusive (x <= y, equal lengths, leading zeros allowed).
std::string fixed_length_range(const std::string& x, const std::string& y) {
  if (x.empty()) return "";
  if (x[0] == y[0]) {
    const std::string rest = fixed_length_range(x.substr(1), y.substr(1));
    return rest.empty() ? digit_class(x[0], x[0]) : digit_class(x[0], x[0]) + " " + rest;
  }
  const std::string xr = x.substr(1), yr = y.substr(1);
  const bool x_low = xr.find_first_not_of('0') == std::string::npos;   // x0 000...: all of x0's block
  const bool y_high = yr.find_first_not_of('9') == std::string::npos;  // y0 999...: all of y0's block
  std::vector<std::string> alts;
  const char mid_lo = static_cast<char>(x_low ? x[0] : x[0] + 1), mid_hi = static_cast<char>(y_high ? y[0] : y[0] - 1);
  if (!x_low) alts.push_back(digit_class(x[0], x[0]) + " " + fixed_length_range(xr, std::string(xr.size(), '9')));
  if (mid_lo <= mid_hi) {
    const std::string tail = any_digits(xr.size());
    alts.push_back(tail.empty() ? digit_class(mid_lo, mid_hi) : digit_class(mid_lo, mid_hi) + " " + tail);
  }
  if (!y_high) alts.push_back(digit_class(y[0], y[0]) + " " + fixed_length_range(std::string(yr.size(), '0'), yr));
  return gbnf_alternation(alts);
}

// Integers in [a, b] written without leading zeros; b == kInfinite: no upper bound.
std::string digits_range(uint64_t a, uint64_t b) {
  std::vector<std::string> alts;
  const int la = num_digits(a), lb = b == kInfinite ? 20 : num_digits(b);
  for (int len = la; len <= std::min(lb, 19); ++len) {
    uint64_t lo = len == la ? a : 1;
    for (int k = 1; k < len && len != la; ++k) lo *= 10;
    uint64_t hi = 9;
    for (int k = 1; k < len; ++k) hi = hi * 10 + 9;
    if (b != kInfinite && len == lb) hi = b;
    if (b == kInfinite && len == la) {
      alts.push_back(fixed_length_range(std::to_string(lo), std::to_string(hi)));
      alts.push_back("[1-9] [0-9]{" + std::to_string(len) + ",}");  // every longer number
      break;
    }
    alts.push_back(fixed_length_range(std::to_string(lo), std::to_string(hi)));
  }
  return gbnf_alternation(alts);
}

struct Limit {
  double value;
  bool exclusive;
};

std::optional<Limit> tighter(std::optional<double> inclusive, std::optional<double> exclusive, bool lower) {
  if (!inclusive && !exclusive) return std::nullopt;
  for (const auto& v : {inclusive, exclusive}) {
    if (v && !(std::fabs(*v) <= 1e18)) throw GrammarError("a numeric bound beyond 1e18 is not supported");
  }
  if (!exclusive) return Limit{*inclusive, false};
  if (!inclusive) return Limit{*exclusive, true};
  const bool exclusive_wins = lower ? *exclusive >= *inclusive : *exclusive <= *inclusive;
  return exclusive_wins ? Limit{*exclusive, true} : Limit{*inclusive, false};
}

// A non-negative bound as decimal digits: integer part and fraction digits without trailing zeros.
struct Decimal {
  uint64_t integer;
  std::string fraction;
  bool exclusive;
};

Decimal to_decimal(double v, bool exclusive) {
  const std::string text = fixed_shortest(std::fabs(v));
  const size_t dot = text.find('.');
  Decimal d{std::stoull(text.substr(0, dot)), dot == std::string::npos ? "" : text.substr(dot + 1), exclusive};
  while (!d.fraction.empty() && d.fraction.back() == '0') d.fraction.pop_back();
  return d;
}

// Fraction digits (after the '.') whose value as 0.F is >= 0.D (> when exclusive), D[i..] still to match.
std::string fraction_at_least(const std::string& d, size_t i, bool exclusive) {
  if (i == d.size()) return exclusive ? "[0-9]* [1-9] [0-9]*" : "[0-9]*";
  std::vector<std::string> alts;
  if (d[i] < '9') alts.push_back(digit_class(static_cast<char>(d[i] + 1), '9') + " [0-9]*");
  alts.push_back(seq_of(digit_class(d[i], d[i]), fraction_at_least(d, i + 1, exclusive)));
  return gbnf_alternation(alts);
}

// Fraction digits whose value is <= 0.D (< when exclusive); nullopt when none can follow.
std::optional<std::string> fraction_at_most(const std::string& d, size_t i, bool exclusive) {
  if (i == d.size()) return exclusive ? std::nullopt : std::optional<std::string>("\"0\"*");
  std::vector<std::string> alts;
  if (d[i] > '0') alts.push_back(digit_class('0', static_cast<char>(d[i] - 1)) + " [0-9]*");
  if (const auto rest = fraction_at_most(d, i + 1, exclusive)) alts.push_back(seq_of(digit_class(d[i], d[i]), *rest));
  if (i > 0) alts.push_back("");  // F ends here: D's remaining digits hold a non-zero one, so F < D
  if (alts.empty() || (alts.size() == 1 && alts[0].empty())) return i > 0 ? std::optional<std::string>("") : std::nullopt;
  return gbnf_alternation(alts);
}

// Fraction digits from position i on, the digits before i equal to both bounds' (missing digits are zeros):
// 0.F within [0.L, 0.U] (ends exclusive as asked); nullopt when none.
std::optional<std::string> fraction_between(const std::string& l, bool lx, const std::string& u, bool ux, size_t i) {
  const char lo = i < l.size() ? l[i] : '0', hi = i < u.size() ? u[i] : '0';
  if (i >= l.size() && i >= u.size()) {  // L == U: only zeros may follow, and only if both ends are inclusive
    if (lx || ux) return std::nullopt;
    return i == 0 ? "\"0\"+" : "\"0\"*";  // at least one digit after the '.'
  }
  std::vector<std::string> alts;
  // F ends here: its value is the common prefix, which is L when L has no more digits; it is below U, since U
  // still has a non-zero digit.
  const bool may_end = i > 0 && i >= l.size() && !lx;
  if (lo == hi) {
    if (const auto rest = fraction_between(l, lx, u, ux, i + 1)) alts.push_back(seq_of(digit_class(lo, lo), *rest));
  } else {
    // lo < hi: past this digit only one bound still binds.
    alts.push_back(seq_of(digit_class(lo, lo), i + 1 >= l.size() ? (lx ? "[0-9]* [1-9] [0-9]*" : "[0-9]*")
                                                                 : fraction_at_least(l, i + 1, lx)));
    if (hi - lo > 1) alts.push_back(digit_class(static_cast<char>(lo + 1), static_cast<char>(hi - 1)) + " [0-9]*");
    if (const auto rest = fraction_at_most(u, i + 1, ux)) alts.push_back(seq_of(digit_class(hi, hi), *rest));
  }
  if (may_end) alts.push_back("");
  if (alts.empty() || (alts.size() == 1 && alts[0].empty())) return may_end ? std::optional<std::string>("") : std::nullopt;
  return gbnf_alternation(alts);
}

// Non-negative numbers I[.F] in [lower, upper] (no upper: unbounded).
std::string positive_range(const Decimal& lower, const std::optional<Decimal>& upper) {
  const std::string any_fraction = "( \".\" [0-9]+ )?";
  auto at_least = [&]() {  // the fractions allowed when I == lower.integer
    if (lower.fraction.empty()) return lower.exclusive ? std::string("\".\" [0-9]* [1-9] [0-9]*") : any_fraction;
    return "\".\" " + fraction_at_least(lower.fraction, 0, lower.exclusive);
  };
  auto at_most = [&]() -> std::optional<std::string> {  // the fractions allowed when I == upper.integer
    if (upper->fraction.empty()) return upper->exclusive ? std::nullopt : std::optional<std::string>("( \".\" \"0\"+ )?");
    const auto f = fraction_at_most(upper->fraction, 0, upper->exclusive);
    return f ? "( \".\" " + *f + " )?" : std::string();
  };
  std::vector<std::string> alts;
  const std::string li = "\"" + std::to_string(lower.integer) + "\"";
  if (!upper) {
    alts.push_back(seq_of(digits_range(lower.integer + 1, kInfinite), any_fraction));
    alts.push_back(seq_of(li, at_least()));
  } else if (lower.integer < upper->integer) {
    if (lower.integer + 1 <= upper->integer - 1) {
      alts.push_back(seq_of(digits_range(lower.integer + 1, upper->integer - 1), any_fraction));
    }
    alts.push_back(seq_of(li, at_least()));
    if (const auto f = at_most()) alts.push_back(seq_of("\"" + std::to_string(upper->integer) + "\"", *f));
  } else {  // one integer part: the fraction between both bounds
    const std::string& l = lower.fraction;
    const std::string& u = upper->fraction;
    std::vector<std::string> fractions;
    if (l.empty() && !lower.exclusive && (!u.empty() || !upper->exclusive)) fractions.push_back("");  // no '.'
    if (const auto f = fraction_between(l, lower.exclusive, u, upper->exclusive, 0)) {
      fractions.push_back("\".\" " + *f);
    }
    if (fractions.empty()) throw GrammarError("the numeric range is empty");
    alts.push_back(seq_of(li, gbnf_alternation(fractions)));
  }
  return gbnf_alternation(alts);
}

}  // namespace

std::string integer_range_gbnf(const NumberBounds& bounds) {
  const auto lower = tighter(bounds.minimum, bounds.exclusive_minimum, true);
  const auto upper = tighter(bounds.maximum, bounds.exclusive_maximum, false);
  std::optional<int64_t> lo, hi;
  if (lower) lo = static_cast<int64_t>(lower->exclusive ? std::floor(lower->value) + 1 : std::ceil(lower->value));
  if (upper) hi = static_cast<int64_t>(upper->exclusive ? std::ceil(upper->value) - 1 : std::floor(upper->value));
  if (lo && hi && *lo > *hi) throw GrammarError("no integer lies in the range");
  std::vector<std::string> alts;
  if (!lo || *lo < 0) {  // negative integers: "-" and the magnitude in [max(1, -hi), -lo]
    const uint64_t a = hi && *hi < 0 ? static_cast<uint64_t>(-*hi) : 1;
    alts.push_back("\"-\" " + digits_range(a, lo ? static_cast<uint64_t>(-*lo) : kInfinite));
  }
  if (!hi || *hi >= 0) {
    alts.push_back(digits_range(lo && *lo > 0 ? static_cast<uint64_t>(*lo) : 0, hi ? static_cast<uint64_t>(*hi) : kInfinite));
  }
  return gbnf_alternation(alts);
}

std::string number_range_gbnf(const NumberBounds& bounds) {
  const auto lower = tighter(bounds.minimum, bounds.exclusive_minimum, true);
  const auto upper = tighter(bounds.maximum, bounds.exclusive_maximum, false);
  if (lower && upper && (lower->value > upper->value ||
                         (lower->value == upper->value && (lower->exclusive || upper->exclusive)))) {
    throw GrammarError("the numeric range is empty");
  }
  std::vector<std::string> alts;
  if (!upper || upper->value > 0 || (upper->value == 0 && !upper->exclusive)) {  // x >= 0
    const Decimal lo = lower && lower->value >= 0 ? to_decimal(lower->value, lower->exclusive) : Decimal{0, "", false};
    std::optional<Decimal> hi;
    if (upper) hi = to_decimal(upper->value, upper->exclusive);
    alts.push_back(positive_range(lo, hi));
    // -0 is 0: where 0 is the lower bound, the negative side below does not spell it.
    if (lower && lower->value == 0 && !lower->exclusive) alts.push_back("\"-0\" ( \".\" \"0\"+ )?");
  }
  if (!lower || lower->value < 0) {  // x <= 0 as "-" y, y = -x
    Decimal lo{0, "", false};
    if (upper && upper->value < 0) lo = to_decimal(upper->value, upper->exclusive);
    if (upper && upper->value == 0 && upper->exclusive) lo.exclusive = true;
    std::optional<Decimal> hi;
    if (lower) hi = to_decimal(lower->value, lower->exclusive);
    alts.push_back("\"-\" " + positive_range(lo, hi));
  }
  return gbnf_alternation(alts);
}

std::string multiple_of_gbnf(uint32_t k, bool with_zero_fraction, const std::string& name) {
  // State r: the digits so far are r modulo k. A digit d moves it to (10 r + d) mod k; the digits leading to one
  // state form one class. The end is allowed in state 0 only.
  auto step = [&](uint32_t r, int first_digit) {
    std::vector<std::string> alts;
    std::map<uint32_t, std::string> by_target;  // target state -> digits
    for (int d = first_digit; d <= 9; ++d) by_target[static_cast<uint32_t>((10ull * r + d) % k)] += char('0' + d);
    for (const auto& [target, digits] : by_target) {
      std::string cls = "[" + digits + "]";
      alts.push_back(cls + " " + name + "-" + std::to_string(target));
    }
    return alts;
  };
  std::vector<std::string> start = {"\"0\""};
  for (const std::string& a : step(0, 1)) start.push_back(a);
  std::string out = name + " ::= \"-\"? " + gbnf_alternation(start) +
                    (with_zero_fraction ? " ( \".\" \"0\"+ )?" : "") + "\n";
  for (uint32_t r = 0; r < k; ++r) {
    std::vector<std::string> alts = step(r, 0);
    if (r == 0) alts.push_back("");
    std::string body = gbnf_alternation(alts);
    if (body.size() > 1 && body.front() == '(' && body.back() == ')') body = body.substr(1, body.size() - 2);
    out += name + "-" + std::to_string(r) + " ::= " + body + "\n";
  }
  return out;
}

std::string js_number(double v) {
  if (!std::isfinite(v)) return "null";
  if (v == 0) return "0";
  const double mag = std::fabs(v);
  char buf[64];
  if (v == std::floor(v) && mag < 1e21) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  const bool fixed = mag >= 1e-6 && mag < 1e21;
  const auto r = std::to_chars(buf, buf + sizeof buf, v, fixed ? std::chars_format::fixed : std::chars_format::scientific);
  std::string out(buf, r.ptr);
  const size_t e = out.find('e');
  if (e != std::string::npos) {  // "1.5e-07" -> "1.5e-7", as JavaScript writes exponents
    size_t digits = e + 2;
    while (digits + 1 < out.size() && out[digits] == '0') out.erase(digits, 1);
  }
  return out;
}

}  // namespace inflight::engine::grammar

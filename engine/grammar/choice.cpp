#include "engine/grammar/choice.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <unordered_set>

#include <nlohmann/json.hpp>

namespace inflight::engine::grammar {

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::vector<uint32_t> decode_utf8(std::string_view text, std::string_view what) {
  std::vector<uint32_t> out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const auto b0 = static_cast<unsigned char>(text[i]);
    int len = b0 < 0x80 ? 1 : (b0 & 0xE0) == 0xC0 ? 2 : (b0 & 0xF0) == 0xE0 ? 3 : (b0 & 0xF8) == 0xF0 ? 4 : 0;
    if (len == 0 || i + len > text.size()) throw GrammarError(std::string(what) + ": invalid UTF-8");
    uint32_t cp = len == 1 ? b0 : len == 2 ? (b0 & 0x1F) : len == 3 ? (b0 & 0x0F) : (b0 & 0x07);
    for (int k = 1; k < len; ++k) {
      const auto b = static_cast<unsigned char>(text[i + k]);
      if ((b & 0xC0) != 0x80) throw GrammarError(std::string(what) + ": invalid UTF-8");
      cp = (cp << 6) | (b & 0x3F);
    }
    static constexpr uint32_t kMinForLength[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMinForLength[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      throw GrammarError(std::string(what) + ": invalid UTF-8");
    }
    out.push_back(cp);
    i += len;
  }
  return out;
}

std::string gbnf_literal(std::string_view text) {
  std::string out = "\"";
  for (uint32_t cp : decode_utf8(text, "literal")) {
    if (cp == '"' || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp < 0x20 || cp == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", cp);
      out += buf;
    } else {
      append_utf8(out, cp);
    }
  }
  out += '"';
  return out;
}

std::string gbnf_class_char(uint32_t cp) {
  if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9')) {
    return std::string(1, static_cast<char>(cp));
  }
  char buf[12];
  if (cp <= 0xFF) {
    std::snprintf(buf, sizeof buf, "\\x%02X", cp);
    return buf;
  }
  if (cp <= 0xFFFF) {
    std::snprintf(buf, sizeof buf, "\\u%04X", cp);
    return buf;
  }
  std::string out;
  append_utf8(out, cp);
  return out;
}

std::string gbnf_class(const std::vector<CodePointRange>& ranges) {
  if (ranges.size() == 1 && ranges[0].first == 0 && ranges[0].last >= 0x10FFFF) return ".";
  const bool negate = ranges.back().last >= 0x10FFFF;
  std::vector<CodePointRange> listed;
  if (negate) {
    // The complement: the gaps between the ranges (the last range reaches U+10FFFF, so none after it).
    uint32_t next = 0;
    for (const CodePointRange& r : ranges) {
      if (r.first > next) listed.push_back({next, r.first - 1});
      next = r.last + 1;
    }
  } else {
    listed = ranges;
  }
  std::string out = negate ? "[^" : "[";
  for (const CodePointRange& r : listed) {
    out += gbnf_class_char(r.first);
    if (r.last != r.first) {
      if (r.last > r.first + 1) out += '-';
      out += gbnf_class_char(r.last);
    }
  }
  out += ']';
  return out;
}

std::string gbnf_alternation(const std::vector<std::string>& alternatives) {
  std::vector<std::string> nonempty;
  std::unordered_set<std::string_view> seen;  // duplicates dropped in linear time (enum lists run to many thousands)
  for (const std::string& a : alternatives) {
    if (!a.empty() && seen.insert(a).second) nonempty.push_back(a);
  }
  if (nonempty.empty()) return "";
  std::string body;
  for (size_t i = 0; i < nonempty.size(); ++i) body += (i ? " | " : "") + nonempty[i];
  const bool has_empty = std::find(alternatives.begin(), alternatives.end(), std::string()) != alternatives.end();
  if (has_empty) return "(" + body + ")?";
  return nonempty.size() == 1 ? body : "(" + body + ")";
}

std::string gbnf_sequence(std::initializer_list<std::string> parts) {
  std::string out;
  for (const std::string& p : parts) {
    if (p.empty()) continue;
    if (!out.empty()) out += ' ';
    out += p;
  }
  return out;
}

namespace {
constexpr auto seq = gbnf_sequence;
}  // namespace

// RFC 4291 section 2.2 (as RFC 3986's IPv6address spells it): at most 8 groups, one "::" standing for one or
// more zero groups, the last 32 bits optionally as dotted IPv4.
std::string ipv6_forms(const std::string& ipv4) {
  const std::string h = "[0-9a-fA-F]{1,4}";
  const std::string ls32 = "( " + h + " \":\" " + h + " | " + ipv4 + " )";
  auto groups = [&](int n) { return n == 0 ? std::string() : "( " + h + " \":\" ){" + std::to_string(n) + "}"; };
  auto before = [&](int n) {  // [ *n( h16 ":" ) h16 ]
    return n < 0 ? std::string() : "( " + (n ? "( " + h + " \":\" ){0," + std::to_string(n) + "} " : "") + h + " )?";
  };
  std::vector<std::string> forms = {groups(6) + " " + ls32, "\"::\" " + groups(5) + " " + ls32};
  for (int k = 0; k <= 4; ++k) forms.push_back(seq({before(k), "\"::\"", groups(4 - k), ls32}));
  forms.push_back(seq({before(5), "\"::\"", h}));
  forms.push_back(seq({before(6), "\"::\""}));
  return gbnf_alternation(forms);
}

// RFC 3986's URI, section 3 and appendix A: scheme ":" hier-part ["?" query] ["#" fragment]; ASCII only (an IRI's
// other characters must be percent-encoded). The empty path is refused ("x:", "x:?q"), as ajv-formats does.
std::string uri(const std::string& ipv6) {
  const std::string unreserved = "[a-zA-Z0-9._~\\x2D]", sub_delims = "[!$&'()*+,;=]";
  const std::string pct = "\"%\" [0-9a-fA-F] [0-9a-fA-F]";
  const std::string pchar = "( " + unreserved + " | " + pct + " | " + sub_delims + " | [:@] )";
  const std::string segment = pchar + "*", segment_nz = pchar + "+";
  const std::string ipv4_or_name = "( " + unreserved + " | " + pct + " | " + sub_delims + " )*";  // reg-name covers IPv4
  const std::string ip_literal = "\"[\" ( " + ipv6 + " | \"v\" [0-9a-fA-F]+ \".\" ( " + unreserved + " | " +
                                 sub_delims + " | \":\" )+ ) \"]\"";
  const std::string userinfo = "( " + unreserved + " | " + pct + " | " + sub_delims + " | \":\" )*";
  const std::string authority = "( " + userinfo + " \"@\" )? ( " + ip_literal + " | " + ipv4_or_name + " ) ( \":\" [0-9]* )?";
  const std::string hier_part = "( \"//\" " + authority + " ( \"/\" " + segment + " )* | \"/\" ( " + segment_nz +
                                " ( \"/\" " + segment + " )* )? | " + segment_nz + " ( \"/\" " + segment + " )* )";
  const std::string query = "( " + pchar + " | [/?] )*";
  return "[a-zA-Z] [a-zA-Z0-9+.\\x2D]* \":\" " + hier_part + " ( \"?\" " + query + " )? ( \"#\" " + query + " )?";
}

std::string json_format_gbnf(std::string_view format) {
  if (format == "date") {
    // Days per month exact; 02-29 only in leap years (divisible by 4, centuries only when divisible by 400).
    const std::string day28 = "( \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8] )";
    const std::string leap = "( [0-9]{2} ( \"0\" [48] | [2468] [048] | [13579] [26] ) | ( [02468] [048] | [13579] [26] ) \"00\" )";
    return "( [0-9]{4} \"-\" ( ( \"0\" [13578] | \"1\" [02] ) \"-\" ( " + day28 + " | \"29\" | \"3\" [01] ) | "
           "( \"0\" [469] | \"11\" ) \"-\" ( " + day28 + " | \"29\" | \"30\" ) | \"02-\" " + day28 + " ) | " +
           leap + " \"-02-29\" )";
  }
  if (format == "time") {
    // A leap second only where one is inserted: 23:59:60 UTC, written here with Z or a zero offset.
    const std::string fraction = "( \".\" [0-9]{1,9} )?";
    return "( ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] " + fraction +
           " ( [zZ] | [-+] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] ) | \"23:59:60\" " + fraction +
           " ( [zZ] | [-+] \"00:00\" ) )";
  }
  if (format == "date-time") return json_format_gbnf("date") + " [tT] " + json_format_gbnf("time");
  if (format == "uuid") {
    return "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12}";
  }
  if (format == "email") {
    const std::string atom = "[a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]";
    const std::string label = "[a-zA-Z0-9] ( [a-zA-Z0-9-]{0,61} [a-zA-Z0-9] )?";
    return atom + "{1,64} ( \".\" " + atom + "{1,64} ){0,31} \"@\" " + label + " ( \".\" " + label + " ){1,8}";
  }
  if (format != "ipv4" && format != "ipv6" && format != "uri") return "";
  const std::string octet = "( \"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9] [0-9] | [0-9] )";
  const std::string ipv4 = octet + " \".\" " + octet + " \".\" " + octet + " \".\" " + octet;
  if (format == "ipv4") return ipv4;
  if (format == "uri") return uri(ipv6_forms(ipv4));
  return ipv6_forms(ipv4);
}

std::string choice_to_gbnf(const std::vector<std::string>& choices, std::string_view root) {
  if (choices.empty()) throw GrammarError("choice: the list of choices is empty");
  std::string out = std::string(root) + " ::= ";
  for (size_t i = 0; i < choices.size(); ++i) {
    if (i > 0) out += " | ";
    out += gbnf_literal(choices[i]);
  }
  out += '\n';
  return out;
}

std::vector<std::pair<std::string, std::string>> json_string_none_of(const std::vector<std::string>& names,
                                                                     const std::string& prefix,
                                                                     const std::string& json_char) {
  struct Node {
    std::map<std::string, size_t> children;  // unit (one character or one escape, as JSON text) -> node
    bool terminal = false;                   // a name ends here
  };
  std::vector<Node> nodes(1);
  for (const std::string& name : names) {
    const std::string text = nlohmann::json(name).dump(-1, ' ', false);
    const std::string inner = text.substr(1, text.size() - 2);
    size_t at = 0;
    for (size_t i = 0; i < inner.size();) {
      size_t len = 1;
      if (inner[i] == '\\') {
        len = inner[i + 1] == 'u' ? 6 : 2;
      } else {
        const auto b = static_cast<unsigned char>(inner[i]);
        len = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : 4;
      }
      const std::string unit = inner.substr(i, len);
      i += len;
      auto it = nodes[at].children.find(unit);
      if (it == nodes[at].children.end()) {
        nodes.push_back({});
        it = nodes[at].children.emplace(unit, nodes.size() - 1).first;
      }
      at = it->second;
    }
    nodes[at].terminal = true;
  }
  const std::string close = "\"\\\"\"";
  const std::string rest = json_char + "* " + close;
  std::vector<std::pair<std::string, std::string>> rules;
  for (size_t n = 0; n < nodes.size(); ++n) {
    std::vector<std::string> alternatives;
    if (!nodes[n].terminal) alternatives.push_back(close);
    std::vector<CodePointRange> raw = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x10FFFF}};  // unescaped JSON chars
    bool escape_child = false;
    for (const auto& [unit, child] : nodes[n].children) {
      alternatives.push_back(gbnf_literal(unit) + " " + prefix + "-" + std::to_string(child));
      if (unit[0] == '\\') {
        escape_child = true;
        continue;
      }
      const uint32_t cp = decode_utf8(unit, "property name")[0];
      std::vector<CodePointRange> cut;
      for (const CodePointRange& r : raw) {
        if (cp < r.first || cp > r.last) {
          cut.push_back(r);
          continue;
        }
        if (cp > r.first) cut.push_back({r.first, cp - 1});
        if (cp < r.last) cut.push_back({cp + 1, r.last});
      }
      raw = cut;
    }
    alternatives.push_back(gbnf_class(raw) + " " + rest);
    if (!escape_child) alternatives.push_back("\"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} ) " + rest);
    std::string body;
    for (size_t i = 0; i < alternatives.size(); ++i) body += (i ? " | " : "") + alternatives[i];
    rules.emplace_back(prefix + "-" + std::to_string(n), body);
  }
  return rules;
}

}  // namespace inflight::engine::grammar

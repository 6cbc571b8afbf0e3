#include "engine/grammar/json_schema.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "engine/grammar/matcher.h"
#include "engine/grammar/regex.h"

namespace inflight::engine::grammar {
namespace {

using Json = nlohmann::ordered_json;

// JSON types as bits; kNumber is "number but not integer" so that {integer} and {number} intersect to integer.
enum : unsigned { kNull = 1, kBool = 2, kObject = 4, kArray = 8, kString = 16, kInteger = 32, kNumber = 64 };
constexpr unsigned kAllTypes = 127;
constexpr int kMaxMultipleOf = 1000;  // multipleOf k: a remainder automaton of k rules

// The keywords of the table in json_schema.h (function statics: safe during other files' static initialisation).
bool is_annotation(std::string_view keyword) {
  static const std::set<std::string, std::less<>> annotations = {
      "title", "description", "default", "examples", "$schema", "$id", "id", "$comment", "deprecated", "readOnly",
      "writeOnly", "discriminator", "$defs", "definitions"};
  return annotations.count(keyword) != 0;
}
bool is_supported(std::string_view keyword) {
  static const std::set<std::string, std::less<>> supported = {
      "type", "enum", "const", "$ref", "allOf", "anyOf", "oneOf", "properties", "required", "additionalProperties",
      "items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems", "minLength", "maxLength",
      "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
      "minProperties", "maxProperties", "not"};
  return supported.count(keyword) != 0;
}

std::string pointer_child(const std::string& ptr, std::string_view key) {
  std::string out = ptr + "/";
  for (char c : key) out += c == '~' ? std::string("~0") : c == '/' ? std::string("~1") : std::string(1, c);
  return out;
}
std::string pointer_child(const std::string& ptr, size_t index) { return ptr + "/" + std::to_string(index); }

[[noreturn]] void fail(const std::string& what, const std::string& ptr) {
  throw GrammarError(what + " at " + (ptr.empty() ? std::string("/") : ptr));
}

// A (sub)schema no instance can match. Absorbed where the value may be absent or another alternative remains (an
// anyOf branch, one type of several, an optional property, a position of items); an error where it may not.
struct Unsatisfiable : GrammarError {
  using GrammarError::GrammarError;
};
[[noreturn]] void unsatisfiable(const std::string& what, const std::string& ptr) {
  throw Unsatisfiable(what + " at " + (ptr.empty() ? std::string("/") : ptr));
}

bool only_annotations(const Json& s) {
  if (!s.is_object()) return false;
  return std::all_of(s.items().begin(), s.items().end(),
                     [](const auto& kv) { return is_annotation(kv.key()); });
}

unsigned type_bit(std::string_view name, const std::string& ptr) {
  if (name == "null") return kNull;
  if (name == "boolean") return kBool;
  if (name == "object") return kObject;
  if (name == "array") return kArray;
  if (name == "string") return kString;
  if (name == "integer") return kInteger;
  if (name == "number") return kInteger | kNumber;
  fail("unknown type \"" + std::string(name) + "\"", ptr);
}

unsigned schema_types(const Json& s, const std::string& ptr) {
  const auto it = s.find("type");
  if (it == s.end()) return kAllTypes;
  if (it->is_string()) return type_bit(it->get<std::string>(), pointer_child(ptr, "type"));
  if (!it->is_array() || it->empty()) fail("\"type\" must be a string or a non-empty array", ptr);
  unsigned bits = 0;
  for (const Json& t : *it) {
    if (!t.is_string()) fail("\"type\" must list strings", ptr);
    bits |= type_bit(t.get<std::string>(), pointer_child(ptr, "type"));
  }
  return bits;
}

unsigned value_type(const Json& v) {
  if (v.is_null()) return kNull;
  if (v.is_boolean()) return kBool;
  if (v.is_object()) return kObject;
  if (v.is_array()) return kArray;
  if (v.is_string()) return kString;
  if (v.is_number_integer() || v.is_number_unsigned()) return kInteger;
  const double d = v.get<double>();
  return std::isfinite(d) && d == std::floor(d) ? kInteger : kNumber;
}

// A value as JSON.stringify writes it (numbers in JavaScript's shortest form), keys in the value's order.
std::string compact_json(const Json& v) {
  if (v.is_number_float()) return js_number(v.get<double>());
  if (v.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + compact_json(v[i]);
    return out + "]";
  }
  if (v.is_object()) {
    std::string out = "{";
    bool first = true;
    for (const auto& kv : v.items()) {
      out += (first ? "" : ",") + Json(kv.key()).dump(-1, ' ', false) + ":" + compact_json(kv.value());
      first = false;
    }
    return out + "}";
  }
  return v.dump(-1, ' ', false);
}

// The 256 single bytes as tokens: a Matcher over them decides exactly a grammar's language (enum filtering).
std::shared_ptr<const TokenVocab> single_byte_vocab() {
  static const auto vocab = [] {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
    return std::make_shared<const TokenVocab>(std::move(tokens), -1);
  }();
  return vocab;
}

constexpr auto seq = gbnf_sequence;

// Draft 4's forms in 2020-12 terms: a boolean exclusiveMinimum/Maximum qualifies minimum/maximum; an items array
// is prefixItems with additionalItems as items; additionalItems without an items array has no effect.
Json normalize(const Json& s) {
  if (!s.is_object()) return s;
  Json out = s;
  for (const char* side : {"Minimum", "Maximum"}) {
    const std::string ex = std::string("exclusive") + side;
    std::string plain = side;
    plain[0] = static_cast<char>(plain[0] - 'A' + 'a');
    const auto it = out.find(ex);
    if (it != out.end() && it->is_boolean()) {
      const bool exclusive = it->get<bool>();
      out.erase(ex);
      if (exclusive && out.contains(plain)) {
        out[ex] = out[plain];
        out.erase(plain);
      }
    }
  }
  const auto items = out.find("items");
  if (items != out.end() && items->is_array()) {
    out["prefixItems"] = *items;
    if (out.contains("additionalItems")) {
      out["items"] = out["additionalItems"];
    } else {
      out.erase("items");
    }
  }
  out.erase("additionalItems");
  return out;
}

// allOf of two subschemas, as a schema: true and false absorb, equal schemas collapse.
Json both(const Json& a, const Json& b) {
  if (a == true || b == false) return b;
  if (b == true || a == false || a == b) return a;
  return Json{{"allOf", Json::array({a, b})}};
}

class Converter {
 public:
  Converter(const Json& root, const JsonSchemaOptions& options) : root_(root), options_(options) {}

  // The grammar of `schema` (found at `ptr`, `depth` deep in the root), or of the builtin rule `builtin_root`.
  std::string run(const Json* schema, std::string_view builtin_root, const std::string& ptr = "", int depth = 0) {
    const std::string body = schema != nullptr ? visit(*schema, ptr, depth) : builtin(std::string(builtin_root));
    std::string out = "root ::= " + body + "\n";
    for (const std::string& name : order_) out += name + " ::= " + rules_.at(name) + "\n";
    if (out.size() > options_.max_grammar_bytes) fail_size();
    return out;
  }

 private:
  [[noreturn]] void fail_size() const {
    throw GrammarError("JSON Schema: the grammar exceeds " + std::to_string(options_.max_grammar_bytes) + " bytes");
  }

  // Each visit's output counts against the size limit as it is made, so that schemas whose anyOf/allOf
  // distribution multiplies stop in bounded time.
  void charge(size_t bytes) {
    produced_ += bytes;
    if (produced_ > 4 * options_.max_grammar_bytes) fail_size();
  }

  // f(), or nullopt when it finds its schema unsatisfiable; the rules it defined meanwhile are dropped.
  template <class F>
  std::optional<std::string> attempt(F&& f) {
    const size_t num_rules = order_.size();
    const auto ref_rules = ref_rules_;
    try {
      return f();
    } catch (const Unsatisfiable& e) {
      why_unsatisfiable_ = e.what();
      for (size_t i = num_rules; i < order_.size(); ++i) rules_.erase(order_[i]);
      order_.resize(num_rules);
      ref_rules_ = ref_rules;
      return std::nullopt;
    }
  }

  std::string unique_name(std::string_view hint) {
    std::string base;
    for (char c : hint) {
      const bool ok = std::isalnum(static_cast<unsigned char>(c)) != 0;
      if (ok) base += c;
      else if (!base.empty() && base.back() != '-') base += '-';
      if (base.size() >= 40) break;
    }
    while (!base.empty() && base.back() == '-') base.pop_back();
    if (base.empty()) base = "s";
    std::string name = base;
    // The next suffix to try is kept per base: objects hand out thousands of names from one base.
    int& k = next_suffix_.try_emplace(base, 2).first->second;
    while (used_.count(name) != 0 || name == "root") name = base + "-" + std::to_string(k++);
    used_.insert(name);
    return name;
  }

  void define(const std::string& name, std::string body) {
    charge(body.size() + name.size());
    rules_[name] = std::move(body);
    order_.push_back(name);
  }

  std::string rule(std::string_view hint, std::string body) {
    const std::string name = unique_name(hint);
    define(name, std::move(body));
    return name;
  }

  std::string ws() { return options_.any_whitespace ? builtin("ws") : ""; }

  // The fixed rules, defined on first use; their names are reserved by the "json-"/"fmt-" prefixes, which
  // unique_name never makes on its own (it never returns these exact names: they are in used_ once defined).
  std::string builtin(const std::string& name) {
    if (rules_.count(name) != 0 || building_.count(name) != 0) return name;
    building_.insert(name);
    used_.insert(name);
    const std::string w = ws();
    const std::string sep = seq({w, "\",\"", w});
    std::string body;
    if (name == "ws") {
      body = "( [ \\t] | \"\\n\" [ \\t]{0,32} )?";
    } else if (name == "json-value") {
      body = builtin("json-object") + " | " + builtin("json-array") + " | " + builtin("json-string") + " | " +
             builtin("json-number") + " | \"true\" | \"false\" | \"null\"";
    } else if (name == "json-object") {
      const std::string member = seq({builtin("json-string"), w, "\":\"", w, builtin("json-value")});
      body = seq({"\"{\"", w, "(", member, "(", sep, member, ")*", ")?", w, "\"}\""});
    } else if (name == "json-array") {
      const std::string v = builtin("json-value");
      body = seq({"\"[\"", w, "(", v, "(", sep, v, ")*", ")?", w, "\"]\""});
    } else if (name == "json-string") {
      body = "\"\\\"\" " + builtin("json-char") + "* \"\\\"\"";
    } else if (name == "json-char") {
      body = "[^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )";
    } else if (name == "json-number") {
      body = "\"-\"? ( \"0\" | [1-9] [0-9]* ) ( \".\" [0-9]+ )? ( [eE] [-+]? [0-9]+ )?";
    } else if (name == "json-fraction") {
      body = "\"-\"? ( \"0\" | [1-9] [0-9]* ) \".\" [0-9]* [1-9] [0-9]*";
    } else if (name == "json-integer") {
      body = "\"-\"? ( \"0\" | [1-9] [0-9]* )";
    } else {
      body = "\"\\\"\" " + json_format_gbnf(name.substr(4)) + " \"\\\"\"";
    }
    building_.erase(name);
    define(name, body);
    return name;
  }

  void check_keywords(const Json& s, const std::string& ptr) {
    for (const auto& kv : s.items()) {
      const std::string& k = kv.key();
      if (is_annotation(k)) continue;
      if (!is_supported(k)) fail("unsupported JSON Schema keyword \"" + k + "\"", ptr);
      const Json& v = kv.value();
      const std::string at = pointer_child(ptr, k);
      if (k == "uniqueItems" && v != false) fail("unsupported JSON Schema keyword \"uniqueItems\" (true)", ptr);
      if (k == "format" && (!v.is_string() || json_format_gbnf(v.get<std::string>()).empty())) {
        fail("unsupported JSON Schema format " + v.dump(), at);
      }
      if ((k == "minLength" || k == "maxLength" || k == "minItems" || k == "maxItems" || k == "minProperties" ||
           k == "maxProperties") &&
          !(v.is_number_unsigned() || (v.is_number() && v.get<double>() >= 0 && v.get<double>() == std::floor(v.get<double>())))) {
        fail("\"" + k + "\" must be a non-negative integer", at);
      }
      if (k == "multipleOf" && !(v.is_number() && v.get<double>() > 0)) fail("\"multipleOf\" must be a positive number", at);
      if ((k == "minimum" || k == "maximum" || k == "exclusiveMinimum" || k == "exclusiveMaximum") &&
          !v.is_number() && !(v.is_boolean() && k.rfind("exclusive", 0) == 0)) {  // draft 4's boolean form
        fail("\"" + k + "\" must be a number", at);
      }
      if ((k == "allOf" || k == "anyOf" || k == "oneOf" || k == "prefixItems") && (!v.is_array() || v.empty())) {
        fail("\"" + k + "\" must be a non-empty array", at);
      }
      if (k == "required" && (!v.is_array() || !std::all_of(v.begin(), v.end(), [](const Json& x) { return x.is_string(); }))) {
        fail("\"required\" must be an array of strings", at);
      }
      if (k == "properties" && !v.is_object()) fail("\"properties\" must be an object", at);
      if (k == "enum" && !v.is_array()) fail("\"enum\" must be an array", at);
      if (k == "pattern" && !v.is_string()) fail("\"pattern\" must be a string", at);
      if (k == "$ref" && !v.is_string()) fail("\"$ref\" must be a string", at);
    }
  }

  // The schema a "#..." reference names, with the pointer to it (for rule names and errors).
  const Json& resolve(const std::string& ref, const std::string& ptr, std::string* target_ptr) {
    if (ref.empty() || ref[0] != '#') fail("unsupported $ref \"" + ref + "\" (only \"#\" and \"#/pointer\")", ptr);
    std::string decoded;  // percent-decoding: the reference is a URI fragment
    for (size_t i = 1; i < ref.size(); ++i) {
      if (ref[i] == '%' && i + 2 < ref.size() + 0 && std::isxdigit(static_cast<unsigned char>(ref[i + 1])) &&
          std::isxdigit(static_cast<unsigned char>(ref[i + 2]))) {
        decoded += static_cast<char>(std::stoi(ref.substr(i + 1, 2), nullptr, 16));
        i += 2;
      } else {
        decoded += ref[i];
      }
    }
    if (!decoded.empty() && decoded[0] != '/') fail("unsupported $ref \"" + ref + "\" (anchors)", ptr);
    const Json* at = &root_;
    std::string walked;
    size_t i = 0;
    while (i < decoded.size()) {
      const size_t next = decoded.find('/', i + 1);
      std::string token = decoded.substr(i + 1, next == std::string::npos ? std::string::npos : next - i - 1);
      std::string key;
      for (size_t k = 0; k < token.size(); ++k) {
        if (token[k] == '~' && k + 1 < token.size() && (token[k + 1] == '0' || token[k + 1] == '1')) {
          key += token[++k] == '0' ? '~' : '/';
        } else {
          key += token[k];
        }
      }
      if (at->is_object() && at->contains(key)) {
        at = &(*at)[key];
      } else if (at->is_array() && !key.empty() && key.find_first_not_of("0123456789") == std::string::npos &&
                 std::stoul(key) < at->size()) {
        at = &(*at)[std::stoul(key)];
      } else {
        fail("$ref \"" + ref + "\" names nothing in the schema", ptr);
      }
      walked = pointer_child(walked, key);
      i = next == std::string::npos ? decoded.size() : next;
    }
    *target_ptr = walked;
    return *at;
  }

  // A schema with its top-level $ref replaced by the (normalized) target merged with the siblings.
  Json inline_ref(const Json& s, const std::string& ptr, int depth) {
    if (!s.is_object() || !s.contains("$ref")) return normalize(s);
    if (depth > options_.max_depth) fail("$ref nesting deeper than " + std::to_string(options_.max_depth), ptr);
    std::string target_ptr;
    const Json& target = resolve(s["$ref"].get<std::string>(), ptr, &target_ptr);
    Json rest = s;
    rest.erase("$ref");
    return merge(rest, inline_ref(target, target_ptr, depth + 1), ptr, depth + 1);
  }

  Json flatten_all_of(const Json& s, const std::string& ptr, int depth) {
    if (!s.is_object() || !s.contains("allOf")) return s;
    if (depth > options_.max_depth) fail("allOf nesting deeper than " + std::to_string(options_.max_depth), ptr);
    Json merged = s;
    merged.erase("allOf");
    for (size_t i = 0; i < s["allOf"].size(); ++i) {
      merged = merge(merged, s["allOf"][i], pointer_child(pointer_child(ptr, "allOf"), i), depth + 1);
    }
    return merged;
  }

  Json merge(const Json& a_in, const Json& b_in, const std::string& ptr, int depth) {
    if (++num_merges_ > kMaxMerges)
      fail("the schema needs more than " + std::to_string(kMaxMerges) + " allOf / $ref merges", ptr);
    if (a_in.is_boolean() || b_in.is_boolean()) return both(a_in, b_in);
    if (only_annotations(a_in)) return normalize(b_in);
    if (only_annotations(b_in)) return normalize(a_in);
    check_keywords(a_in, ptr);
    check_keywords(b_in, ptr);
    // Nested allOf merged first, depth-first, so that properties keep the order they are written in.
    const Json a = flatten_all_of(inline_ref(a_in, ptr, depth), ptr, depth);
    const Json b = flatten_all_of(inline_ref(b_in, ptr, depth), ptr, depth);
    if (a.is_boolean() || b.is_boolean()) return both(a, b);
    Json out = a;
    // properties and additionalProperties together: a key must pass each side's property schema, or that side's
    // additionalProperties where the side does not declare it.
    if (a.contains("properties") || b.contains("properties") ||
        (a.contains("additionalProperties") && b.contains("additionalProperties"))) {
      const Json empty = Json::object();
      const Json& pa = a.contains("properties") ? a["properties"] : empty;
      const Json& pb = b.contains("properties") ? b["properties"] : empty;
      const Json aa = a.value("additionalProperties", Json(true)), ab = b.value("additionalProperties", Json(true));
      Json props = Json::object();
      for (const auto& kv : pa.items()) props[kv.key()] = both(kv.value(), pb.contains(kv.key()) ? pb[kv.key()] : ab);
      for (const auto& kv : pb.items()) {
        if (!props.contains(kv.key())) props[kv.key()] = both(aa, kv.value());
      }
      out["properties"] = props;
      const Json add = both(aa, ab);
      if (add == true) out.erase("additionalProperties");
      else out["additionalProperties"] = add;
    } else if (b.contains("additionalProperties")) {
      out["additionalProperties"] = b["additionalProperties"];
    }
    // prefixItems and items together, the same way: position i passes each side's prefixItems[i], or that side's
    // items past its prefix.
    if (a.contains("prefixItems") || b.contains("prefixItems")) {
      const Json none = Json::array();
      const Json& pa = a.contains("prefixItems") ? a["prefixItems"] : none;
      const Json& pb = b.contains("prefixItems") ? b["prefixItems"] : none;
      const Json ia = a.value("items", Json(true)), ib = b.value("items", Json(true));
      Json prefix = Json::array();
      for (size_t i = 0; i < std::max(pa.size(), pb.size()); ++i) {
        prefix.push_back(both(i < pa.size() ? pa[i] : ia, i < pb.size() ? pb[i] : ib));
      }
      out["prefixItems"] = prefix;
      const Json items = both(ia, ib);
      if (items == true) out.erase("items");
      else out["items"] = items;
    }
    for (const auto& kv : b.items()) {
      const std::string& k = kv.key();
      const Json& v = kv.value();
      if (k == "properties" || k == "additionalProperties" || is_annotation(k)) continue;
      if ((k == "prefixItems" || k == "items") && out.contains("prefixItems")) continue;  // merged above
      if (!out.contains(k)) {
        out[k] = v;
        continue;
      }
      const Json& o = out[k];
      if (o == v) continue;
      if (k == "type") {
        const unsigned bits = schema_types(a, ptr) & schema_types(b, ptr);
        Json list = Json::array();
        for (const char* name : {"null", "boolean", "object", "array", "string", "integer"}) {
          if (bits & type_bit(name, ptr) & ~kNumber) list.push_back(name);
        }
        if (bits & kNumber) list.back() = "number";
        if (bits == 0) unsatisfiable("allOf: the types do not intersect", ptr);
        out[k] = list;
      } else if (k == "required") {
        for (const Json& name : v) {
          if (std::find(out[k].begin(), out[k].end(), name) == out[k].end()) out[k].push_back(name);
        }
      } else if (k == "allOf") {
        for (const Json& x : v) out[k].push_back(x);
      } else if (k == "enum" || k == "const") {
        Json values = Json::array();
        const Json ov = k == "enum" ? o : Json::array({o});
        for (const Json& x : ov) {
          if (k == "enum" ? std::find(v.begin(), v.end(), x) != v.end() : x == v) values.push_back(x);
        }
        out.erase(k);
        out["enum"] = values;
      } else if (k == "minimum" || k == "exclusiveMinimum" || k == "minLength" || k == "minItems" || k == "minProperties") {
        out[k] = std::max(o.get<double>(), v.get<double>());
      } else if (k == "maximum" || k == "exclusiveMaximum" || k == "maxLength" || k == "maxItems" || k == "maxProperties") {
        out[k] = std::min(o.get<double>(), v.get<double>());
      } else if (k == "items") {
        out[k] = both(o, v);
      } else {
        fail("allOf: cannot merge two different \"" + k + "\"", ptr);
      }
    }
    if (a.contains("enum") && b.contains("const")) {  // const met enum above only when both had the same key
      Json values = Json::array();
      for (const Json& x : out["enum"]) if (x == b["const"]) values.push_back(x);
      out["enum"] = values;
      out.erase("const");
    }
    return out;
  }

  std::string visit(const Json& s_in, const std::string& ptr, int depth) {
    if (depth > options_.max_depth) fail("schema nesting deeper than " + std::to_string(options_.max_depth), ptr);
    if (s_in.is_boolean()) {
      if (s_in.get<bool>()) return builtin("json-value");
      unsatisfiable("schema false matches nothing", ptr);
    }
    if (!s_in.is_object()) fail("a schema must be an object or a boolean", ptr);
    check_keywords(s_in, ptr);
    // normalize() copies; most schemas need no rewriting, and a copy here would copy the whole subtree per level.
    const bool draft4_forms = s_in.contains("additionalItems") || (s_in.contains("items") && s_in["items"].is_array()) ||
                              (s_in.contains("exclusiveMinimum") && s_in["exclusiveMinimum"].is_boolean()) ||
                              (s_in.contains("exclusiveMaximum") && s_in["exclusiveMaximum"].is_boolean());
    const Json normalized = draft4_forms ? normalize(s_in) : Json();
    const Json& s = draft4_forms ? normalized : s_in;
    std::string out;
    if (s.contains("$ref")) {
      Json rest = s;
      rest.erase("$ref");
      out = only_annotations(rest) ? ref_rule(s["$ref"].get<std::string>(), ptr, depth)
                                   : visit(inline_ref(s, ptr, depth), ptr, depth + 1);
    } else if (s.contains("allOf")) {
      Json merged = s;
      merged.erase("allOf");
      for (size_t i = 0; i < s["allOf"].size(); ++i) {
        merged = merge(merged, s["allOf"][i], pointer_child(pointer_child(ptr, "allOf"), i), depth + 1);
      }
      out = visit(merged, ptr, depth + 1);
    } else if (s.contains("anyOf") || s.contains("oneOf")) {
      if (s.contains("anyOf") && s.contains("oneOf")) fail("anyOf beside oneOf is not supported", ptr);
      const std::string k = s.contains("anyOf") ? "anyOf" : "oneOf";
      Json rest = s;
      rest.erase(k);
      std::vector<Json> branches;
      std::vector<std::string> alternatives;
      for (size_t i = 0; i < s[k].size(); ++i) {
        const std::string at = pointer_child(pointer_child(ptr, k), i);
        Json branch = false;
        const auto alternative = attempt([&] {
          branch = merge(rest, s[k][i], at, depth + 1);
          return visit(branch, at, depth + 1);
        });
        if (!alternative) continue;  // a branch nothing matches is no alternative (nor overlaps another)
        branches.push_back(branch);
        alternatives.push_back(*alternative);
      }
      if (alternatives.empty()) unsatisfiable(k + ": no branch can match", ptr);
      if (k == "oneOf" && !disjoint(branches, ptr, depth)) {
        fail("oneOf whose branches may overlap is not supported (exclusivity cannot be enforced; use anyOf)", ptr);
      }
      out = gbnf_alternation(alternatives);
    } else if (s.contains("enum") || s.contains("const")) {
      out = enum_values(s, ptr, depth);
    } else {
      out = typed(s, ptr, depth);
    }
    charge(out.size());
    return out;
  }

  std::string ref_rule(const std::string& ref, const std::string& ptr, int depth) {
    std::string target_ptr;
    const Json& target = resolve(ref, ptr, &target_ptr);
    const auto known = ref_rules_.find(target_ptr);
    if (known != ref_rules_.end()) return known->second;
    const std::string name = unique_name(target_ptr.empty() ? "ref-root" : "ref" + target_ptr);
    ref_rules_[target_ptr] = name;
    std::string body = visit(target, target_ptr, depth + 1);
    if (body == name) fail("circular $ref \"" + ref + "\"", ptr);
    define(name, std::move(body));
    return name;
  }

  // Branches that no instance can match twice: pairwise disjoint types, pairwise disjoint enum/const values, or
  // objects with a required property whose enum/const values are pairwise disjoint (a discriminator).
  bool disjoint(const std::vector<Json>& branches_in, const std::string& ptr, int depth) {
    std::vector<Json> branches;
    for (const Json& b : branches_in) {
      if (b != false) branches.push_back(inline_ref(b, ptr, depth + 1));
    }
    auto types = [&](const Json& b) -> unsigned {
      if (b.is_boolean()) return kAllTypes;
      if (b.contains("enum") || b.contains("const")) {
        unsigned bits = 0;
        for (const Json& v : b.contains("enum") ? b["enum"] : Json::array({b["const"]})) bits |= value_type(v);
        return bits & schema_types(b, ptr);
      }
      return schema_types(b, ptr);
    };
    auto values = [](const Json& b) -> std::optional<Json> {
      if (!b.is_object()) return std::nullopt;
      if (b.contains("const")) return Json::array({b["const"]});
      if (b.contains("enum")) return b["enum"];
      return std::nullopt;
    };
    auto overlap = [](const Json& x, const Json& y) {
      return std::any_of(x.begin(), x.end(), [&](const Json& v) { return std::find(y.begin(), y.end(), v) != y.end(); });
    };
    bool by_type = true, by_value = true;
    for (size_t i = 0; i < branches.size(); ++i) {
      for (size_t j = i + 1; j < branches.size(); ++j) {
        unsigned ti = types(branches[i]), tj = types(branches[j]);
        if (ti & kNumber) ti |= kInteger;
        if (tj & kNumber) tj |= kInteger;
        if (ti & tj) by_type = false;
        const auto vi = values(branches[i]), vj = values(branches[j]);
        if (!vi || !vj || overlap(*vi, *vj)) by_value = false;
      }
    }
    if (by_type || by_value) return true;
    if (branches.empty() || !branches[0].is_object() || !branches[0].contains("properties")) return false;
    for (const auto& kv : branches[0]["properties"].items()) {  // a discriminator property
      bool ok = true;
      std::vector<Json> sets;
      for (const Json& b : branches) {
        const bool required = b.is_object() && b.contains("required") &&
                              std::find(b["required"].begin(), b["required"].end(), kv.key()) != b["required"].end();
        if (!required || types(b) != kObject || !b.contains("properties") || !b["properties"].contains(kv.key())) {
          ok = false;
          break;
        }
        const auto v = values(inline_ref(b["properties"][kv.key()], ptr, depth + 1));
        if (!v) {
          ok = false;
          break;
        }
        for (const Json& seen : sets) ok = ok && !overlap(seen, *v);
        sets.push_back(*v);
      }
      if (ok) return true;
    }
    return false;
  }

  // The enum/const values (filtered by type) that the rest of the schema accepts: the rest is compiled on its own
  // and each value's compact text run through its grammar, so every keyword the table supports filters exactly
  // (an object value whose keys are not in the properties' order is dropped: stricter, never looser).
  std::string enum_values(const Json& s, const std::string& ptr, int depth) {
    const Json values = s.contains("const") ? Json::array({s["const"]}) : s["enum"];
    const unsigned types = allowed_types(s, ptr, depth);
    if (s.contains("enum") && s.contains("const") && std::find(s["enum"].begin(), s["enum"].end(), s["const"]) == s["enum"].end()) {
      unsatisfiable("const is not among enum's values: the schema matches nothing", ptr);
    }
    Json rest = s;
    for (const char* k : {"enum", "const", "type"}) rest.erase(k);
    std::shared_ptr<const Grammar> check;
    if (!only_annotations(rest)) {
      if (s.contains("type")) rest["type"] = s["type"];
      JsonSchemaOptions compact = options_;
      compact.any_whitespace = false;
      try {
        check = parse_gbnf(Converter(root_, compact).run(&rest, "", ptr, depth + 1));
      } catch (const Unsatisfiable&) {
        unsatisfiable("no enum/const value passes the schema's other keywords: it matches nothing", ptr);
      }
    }
    std::vector<std::string> literals;
    for (const Json& v : values) {
      const unsigned t = value_type(v);
      if ((t & types) == 0) continue;  // (an integer value is a number too: "number" holds both bits)
      const std::string text = compact_json(v);
      if (check) {
        Matcher m(check, single_byte_vocab(), 1);
        if (!(m.accept_bytes(text) && m.can_end())) continue;
      }
      literals.push_back(gbnf_literal(text));
    }
    if (literals.empty()) unsatisfiable("no enum/const value passes the schema's other keywords: it matches nothing", ptr);
    return gbnf_alternation(literals);
  }

  // The types `s` allows: its `type` less those its `not` names. `not` takes only `type` (or true/false/{}):
  // anything else would need the complement of a grammar.
  unsigned allowed_types(const Json& s, const std::string& ptr, int depth) {
    const unsigned types = schema_types(s, ptr);
    if (!s.contains("not")) return types;
    const std::string at = pointer_child(ptr, "not");
    const Json n = inline_ref(s["not"], at, depth + 1);
    if (n == false) return types;
    if (!n.is_boolean() && !n.is_object()) fail("a schema must be an object or a boolean", at);
    if (n == true || only_annotations(n)) unsatisfiable("\"not\" of a schema every value matches: nothing matches", ptr);
    for (const auto& kv : n.items()) {
      if (kv.key() != "type" && !is_annotation(kv.key())) {
        fail("\"not\" with keywords other than type is not supported", at);
      }
    }
    const unsigned left = types & ~schema_types(n, at);
    if (left == 0) unsatisfiable("\"not\" excludes every type the schema allows", ptr);
    return left;
  }

  std::string typed(const Json& s, const std::string& ptr, int depth) {
    const unsigned types = allowed_types(s, ptr, depth);
    std::vector<std::string> alternatives;
    if (types & kNull) alternatives.push_back("\"null\"");
    if (types & kBool) alternatives.push_back("(\"true\" | \"false\")");
    // A type whose keywords leave it no instance drops out while another type remains.
    std::string why;  // the first type's reason for having no instance
    auto add = [&](auto&& make) {
      const auto alternative = attempt([&] { return make(); });
      if (alternative) alternatives.push_back(*alternative);
      else if (why.empty()) why = why_unsatisfiable_;
    };
    if (types & kObject) add([&] { return object(s, ptr, depth); });
    if (types & kArray) add([&] { return array(s, ptr, depth); });
    if (types & kString) add([&] { return string(s, ptr); });
    if (types & (kInteger | kNumber)) add([&] { return number(s, ptr, types); });
    if (alternatives.empty()) throw Unsatisfiable(why);
    return gbnf_alternation(alternatives);
  }

  size_t count(const Json& s, const char* key, size_t fallback, const std::string& ptr) {
    if (!s.contains(key)) return fallback;
    const double v = s[key].get<double>();
    if (v > options_.max_repetition) {
      fail("\"" + std::string(key) + "\" above the limit of " + std::to_string(options_.max_repetition), ptr);
    }
    return static_cast<size_t>(v);
  }

  // x{lo,hi} with hi == kUnbounded for no upper bound; "" when hi == 0. `x` must be a primary.
  static constexpr size_t kUnbounded = static_cast<size_t>(-1);
  static std::string repeat(const std::string& x, size_t lo, size_t hi) {
    if (hi == 0 || x.empty()) return "";
    if (hi == kUnbounded) return x + (lo == 0 ? "*" : lo == 1 ? "+" : "{" + std::to_string(lo) + ",}");
    if (lo == hi) return lo == 1 ? x : x + "{" + std::to_string(lo) + "}";
    if (lo == 0 && hi == 1) return x + "?";
    return x + "{" + std::to_string(lo) + "," + std::to_string(hi) + "}";
  }

  std::string string(const Json& s, const std::string& ptr) {
    const bool lengths = s.contains("minLength") || s.contains("maxLength");
    if (s.contains("format")) {
      if (lengths || s.contains("pattern")) fail("format beside minLength/maxLength/pattern is not supported", ptr);
      return builtin("fmt-" + s["format"].get<std::string>());
    }
    if (s.contains("pattern")) {
      if (lengths) fail("pattern beside minLength/maxLength is not supported", ptr);
      RegexOptions ro;
      ro.search = true;
      ro.json_string = true;
      ro.max_repetition = options_.max_repetition;
      ro.root = unique_name("pattern" + ptr);
      ro.rule_prefix = ro.root;
      std::string rules;
      try {
        rules = regex_to_gbnf(s["pattern"].get<std::string>(), ro);
      } catch (const GrammarError& e) {
        fail(std::string(e.what()) + " in \"pattern\"", ptr);
      }
      add_rules(rules);
      return seq({"\"\\\"\"", ro.root, "\"\\\"\""});
    }
    if (!lengths) return builtin("json-string");
    const size_t lo = count(s, "minLength", 0, ptr), hi = count(s, "maxLength", kUnbounded, ptr);
    if (lo > hi) unsatisfiable("minLength above maxLength: no string matches", ptr);
    return seq({"\"\\\"\"", repeat(builtin("json-char"), lo, hi), "\"\\\"\""});
  }

  // Rules as regex.h writes them, `name ::= body` lines, kept as rules of this grammar.
  void add_rules(const std::string& rules) {
    size_t start = 0;
    while (start < rules.size()) {
      const size_t end = rules.find('\n', start);
      const std::string line = rules.substr(start, end - start);
      const size_t eq = line.find(" ::= ");
      used_.insert(line.substr(0, eq));
      define(line.substr(0, eq), line.substr(eq + 5));
      start = end + 1;
    }
  }

  // types: kInteger alone for integers, kNumber alone for numbers that are no integer (`not: {type: integer}`),
  // both for any number.
  std::string number(const Json& s, const std::string& ptr, unsigned types) {
    const bool integer = (types & kNumber) == 0;
    NumberBounds bounds;
    auto bound = [&](const char* key) -> std::optional<double> {
      if (!s.contains(key)) return std::nullopt;
      return s[key].get<double>();
    };
    bounds.minimum = bound("minimum");
    bounds.maximum = bound("maximum");
    bounds.exclusive_minimum = bound("exclusiveMinimum");
    bounds.exclusive_maximum = bound("exclusiveMaximum");
    const bool bounded = bounds.minimum || bounds.maximum || bounds.exclusive_minimum || bounds.exclusive_maximum;
    if ((types & kInteger) == 0) {  // not an integer: a fraction with a non-zero digit, no exponent
      if (bounded || s.contains("multipleOf")) fail("a non-integer number beside bounds or multipleOf is not supported", ptr);
      return builtin("json-fraction");
    }
    if (s.contains("multipleOf")) {
      const double k = s["multipleOf"].get<double>();
      if (bounded) fail("multipleOf beside minimum/maximum is not supported", ptr);
      if (!(k >= 1 && k <= kMaxMultipleOf && k == std::floor(k))) {
        fail("multipleOf other than an integer from 1 to " + std::to_string(kMaxMultipleOf) + " is not supported", ptr);
      }
      const std::string name = unique_name("multiple" + ptr);
      add_rules(multiple_of_gbnf(static_cast<uint32_t>(k), !integer, name));
      return name;
    }
    if (!bounded) {
      return builtin(integer ? "json-integer" : "json-number");
    }
    try {
      return "(" + (integer ? integer_range_gbnf(bounds) : number_range_gbnf(bounds)) + ")";
    } catch (const GrammarError& e) {
      const std::string what = e.what();
      if (what.find("empty") != std::string::npos || what.find("no integer") != std::string::npos) unsatisfiable(what, ptr);
      fail(what, ptr);
    }
  }

  std::string object(const Json& s, const std::string& ptr, int depth) {
    struct Member {  // a property that may appear (those that may not are only kept out of the additional keys)
      std::string name;   // as JSON text, with its quotes
      std::string value;  // the value's GBNF
      bool required;
    };
    const Json empty = Json::object();
    const Json& props = s.contains("properties") ? s["properties"] : empty;
    const Json additional = s.value("additionalProperties", Json(true));
    std::set<std::string> required;
    if (s.contains("required")) {
      for (const Json& r : s["required"]) required.insert(r.get<std::string>());
    }
    std::vector<Member> members;
    std::vector<std::string> declared;
    for (const auto& kv : props.items()) {
      const std::string at = pointer_child(pointer_child(ptr, "properties"), kv.key());
      const bool req = required.count(kv.key()) != 0;
      declared.push_back(kv.key());
      if (kv.value() == false) {
        if (req) unsatisfiable("required property \"" + kv.key() + "\" has schema false: no object matches", at);
        continue;
      }
      // An optional property whose schema nothing matches may not appear, as if its schema were false.
      const auto value = req ? std::optional<std::string>(visit(kv.value(), at, depth + 1))
                             : attempt([&] { return visit(kv.value(), at, depth + 1); });
      if (value) members.push_back({Json(kv.key()).dump(-1, ' ', false), *value, req});
    }
    if (s.contains("required")) {
      for (const Json& r : s["required"]) {
        const std::string name = r.get<std::string>();
        if (props.contains(name)) continue;
        if (additional == false) unsatisfiable("required property \"" + name + "\" is not allowed by additionalProperties false", ptr);
        declared.push_back(name);
        members.push_back({Json(name).dump(-1, ' ', false), visit(additional, pointer_child(ptr, "additionalProperties"), depth + 1), true});
      }
    }
    const std::string w = ws();
    const std::string sep = seq({w, "\",\"", w});
    const std::string hint = "obj" + ptr;
    std::string extra;  // one additional member: a key that is no declared name, and its value
    if (additional != false) {
      const std::string key = declared.empty() ? builtin("json-string") : other_key(declared, hint);
      const auto value = attempt([&] { return visit(additional, pointer_child(ptr, "additionalProperties"), depth + 1); });
      if (value) extra = seq({key, w, "\":\"", w, *value});
    }
    // minProperties/maxProperties count the members written: without them the count is not tracked (always 0).
    const size_t min_props = count(s, "minProperties", 0, ptr), max_props = count(s, "maxProperties", kUnbounded, ptr);
    const bool counting = min_props > 0 || max_props != kUnbounded;
    if (min_props > max_props) unsatisfiable("minProperties above maxProperties: no object matches", ptr);
    auto kv = [&](const Member& m) { return seq({gbnf_literal(m.name), w, "\":\"", w, m.value}); };
    auto as_rule = [&](const std::string& body) { return body.empty() ? body : rule(hint, body); };
    // tail(i, c): what may follow once c members are written and members[i..] are still to come, each after a
    // comma; nullopt when nothing can. head(i): the members when none is written yet. Both built from the end
    // (no recursion: objects may have thousands of properties), one rule each, so the text grows linearly with
    // the properties (times the count when minProperties/maxProperties are given).
    const size_t n = members.size();
    const size_t max_count = counting ? std::min(n, max_props) : 0;  // c > i cannot occur at position i
    std::vector<std::vector<std::optional<std::string>>> tails(n + 1, std::vector<std::optional<std::string>>(max_count + 2));
    auto tail = [&](size_t i, size_t c) { return counting ? tails[i][std::min(c, max_count + 1)] : tails[i][0]; };
    for (size_t i = n + 1; i-- > 0;) {
      for (size_t c = counting ? 1 : 0; c <= (counting ? std::min(i, max_count) : 0); ++c) {
        std::optional<std::string> out;
        if (i == n) {  // the additional members
          const size_t lo = min_props > c ? min_props - c : 0;
          const size_t hi = !counting || max_props == kUnbounded ? kUnbounded : max_props - c;
          if (lo > hi) {
            // more members needed than allowed: nothing ends here
          } else if (!extra.empty()) {
            out = as_rule(repeat("(" + seq({sep, extra}) + ")", lo, hi));
          } else if (lo == 0) {
            out = "";
          }
        } else {
          std::vector<std::string> alts;
          if (!counting || c < max_props) {
            if (const auto next = tail(i + 1, c + 1)) alts.push_back("(" + seq({sep, kv(members[i]), *next}) + ")");
          }
          if (!members[i].required) {
            if (const auto next = tail(i + 1, c)) alts.push_back(*next);
          }
          if (!alts.empty()) out = as_rule(gbnf_alternation(alts));
        }
        tails[i][c] = out;
      }
    }
    std::optional<std::string> head;
    for (size_t i = n + 1; i-- > 0;) {
      std::vector<std::string> alts;
      if (i == n) {
        if (min_props == 0) alts.push_back("");
        if (!extra.empty() && max_props > 0) {
          alts.push_back(seq({extra, repeat("(" + seq({sep, extra}) + ")", min_props > 1 ? min_props - 1 : 0,
                                            max_props == kUnbounded ? kUnbounded : max_props - 1)}));
        }
      } else {
        if (max_props > 0) {
          if (const auto next = tail(i + 1, 1)) alts.push_back(seq({kv(members[i]), *next}));
        }
        if (!members[i].required && head) alts.push_back(*head);
      }
      head = alts.empty() ? std::nullopt : std::optional<std::string>(i == 0 ? gbnf_alternation(alts) : as_rule(gbnf_alternation(alts)));
    }
    const auto members_text = head;
    if (!members_text) unsatisfiable("no object has the required properties within minProperties/maxProperties", ptr);
    const std::string head_text = *members_text;
    return "(" + seq({"\"{\"", w, head_text, w, "\"}\""}) + ")";
  }

  // A JSON string (with its quotes) that is none of `names` (choice.h builds the rules).
  std::string other_key(const std::vector<std::string>& names, const std::string& hint) {
    const std::string prefix = unique_name(hint + "-key");
    const auto rules = json_string_none_of(names, prefix, builtin("json-char"));
    for (const auto& [name, body] : rules) {
      used_.insert(name);
      define(name, body);
    }
    return seq({"\"\\\"\"", rules.front().first});
  }

  std::string array(const Json& s, const std::string& ptr, int depth) {
    const Json prefix = s.value("prefixItems", Json::array());
    const Json items = s.value("items", Json(true));
    const size_t min = count(s, "minItems", 0, ptr);
    size_t max = count(s, "maxItems", kUnbounded, ptr);
    if (min > max) unsatisfiable("minItems above maxItems: no array matches", ptr);
    std::vector<std::string> elements;  // the prefix positions that can be reached
    for (size_t i = 0; i < prefix.size() && i < max; ++i) {
      if (prefix[i] == false) {
        max = i;
        break;
      }
      const auto element = attempt([&] { return visit(prefix[i], pointer_child(pointer_child(ptr, "prefixItems"), i), depth + 1); });
      if (!element) {  // no value fits position i: the array ends before it
        max = i;
        break;
      }
      elements.push_back(*element);
    }
    const size_t k = elements.size();
    std::string item;  // past the prefix; none when nothing matches items (then as items false)
    if (max > k) {
      if (const auto v = attempt([&] { return visit(items, pointer_child(ptr, "items"), depth + 1); })) item = "(" + *v + ")";
    }
    if (item.empty()) max = std::min(max, k);
    if (min > max) unsatisfiable("minItems needs more items than items/prefixItems allow: no array matches", ptr);
    const std::string w = ws();
    const std::string sep = seq({w, "\",\"", w});
    const size_t tail_lo = min > k ? min - k : 0, tail_hi = max == kUnbounded ? kUnbounded : max - k;
    std::string body;
    if (k == 0) {
      if (tail_hi > 0) {
        const std::string first = seq({item, repeat("(" + seq({sep, item}) + ")", tail_lo > 0 ? tail_lo - 1 : 0,
                                                    tail_hi == kUnbounded ? kUnbounded : tail_hi - 1)});
        body = tail_lo == 0 ? "(" + first + ")?" : first;
      }
    } else {
      // from(i): element i and what may follow it. Past a few positions each from(i) is a rule, so that long
      // prefixItems make neither deep parentheses nor quadratic copying.
      std::string from = seq({elements[k - 1], repeat("(" + seq({sep, item}) + ")", tail_lo, tail_hi)});
      for (size_t i = k - 1; i-- > 0;) {
        if (k - i > 4) from = rule("arr" + ptr, from);
        const std::string next = "(" + seq({sep, from}) + ")";
        from = seq({elements[i], i + 1 < min ? next : next + "?"});
      }
      body = min == 0 ? "(" + from + ")?" : from;
    }
    return "(" + seq({"\"[\"", w, body, w, "\"]\""}) + ")";
  }

  const Json& root_;
  const JsonSchemaOptions& options_;
  std::map<std::string, std::string> rules_;     // name -> body
  std::vector<std::string> order_;               // rule names in definition order
  std::set<std::string> used_;                   // every name given out
  std::map<std::string, int> next_suffix_;       // base name -> the next -N suffix unique_name tries (from 2)
  std::set<std::string> building_;               // builtins being defined (they refer to each other)
  std::map<std::string, std::string> ref_rules_; // target pointer -> rule name
  size_t produced_ = 0;
  // Merges done (allOf, $ref with siblings): a $ref graph that an allOf reaches twice per level doubles the work
  // each level, which max_depth does not bound; past kMaxMerges the schema is refused.
  size_t num_merges_ = 0;
  static constexpr size_t kMaxMerges = 20000;
  std::string why_unsatisfiable_;                // the message of the last Unsatisfiable that attempt() absorbed
};

// Whether `root` nests deeper than `limit` (arrays and objects), found without recursion: copying, comparing and
// printing a JSON value recurse once per level, so a value nested past the stack must be refused before any of it.
template <class J>
bool nested_deeper_than(const J& root, size_t limit) {
  std::vector<std::pair<const J*, size_t>> stack = {{&root, 1}};
  while (!stack.empty()) {
    const auto [value, depth] = stack.back();
    stack.pop_back();
    if (depth > limit) return true;
    if (value->is_object() || value->is_array()) {
      for (const J& child : *value) stack.emplace_back(&child, depth + 1);
    }
  }
  return false;
}

// A schema's JSON may nest more than its schemas do (properties -> name -> schema is two levels, enum values
// nest freely): the text's bound is a multiple of max_depth.
size_t max_json_depth(const JsonSchemaOptions& options) { return 4 * static_cast<size_t>(std::max(options.max_depth, 1)); }

[[noreturn]] void fail_json_depth(const JsonSchemaOptions& options) {
  throw GrammarError("JSON Schema: nested deeper than " + std::to_string(max_json_depth(options)) + " levels");
}

}  // namespace

std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema, const JsonSchemaOptions& options) {
  if (nested_deeper_than(schema, max_json_depth(options))) fail_json_depth(options);
  try {
    return Converter(schema, options).run(&schema, "");
  } catch (const nlohmann::json::exception& e) {
    // NOTE: a keyword's value of a type check_keywords does not check; the input's fault, so a GrammarError.
    throw GrammarError(std::string("JSON Schema: invalid schema: ") + e.what());
  }
}

std::string json_schema_to_gbnf(const nlohmann::json& schema, const JsonSchemaOptions& options) {
  if (nested_deeper_than(schema, max_json_depth(options))) fail_json_depth(options);  // before the copy below
  return json_schema_to_gbnf(nlohmann::ordered_json(schema), options);
}

std::string json_schema_to_gbnf(std::string_view schema_json, const JsonSchemaOptions& options) {
  nlohmann::ordered_json schema;
  try {
    schema = nlohmann::ordered_json::parse(schema_json);
  } catch (const nlohmann::json::exception& e) {
    throw GrammarError(std::string("JSON Schema: not valid JSON: ") + e.what());
  }
  return json_schema_to_gbnf(schema, options);
}

std::string json_object_gbnf(const JsonSchemaOptions& options) {
  const nlohmann::ordered_json none;
  return Converter(none, options).run(nullptr, "json-object");
}

std::string any_json_gbnf(const JsonSchemaOptions& options) {
  const nlohmann::ordered_json none;
  return Converter(none, options).run(nullptr, "json-value");
}

}  // namespace inflight::engine::grammar

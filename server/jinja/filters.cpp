// Jinja's filters (`x | trim`, `tools | tojson(indent=4)`, `messages | selectattr('role', 'equalto', 'user')`).
#include <algorithm>
#include <cmath>
#include <string_view>

#include "server/jinja/builtins.h"
#include "server/jinja/string_ops.h"

namespace inflight::server::jinja {

namespace {

Value opt(const Args& a, size_t i, const char* name) {
  const Value* v = a.get(i, name);
  return v ? *v : Value::undefined();
}

bool flag(const Args& a, size_t i, const char* name, bool dflt) {
  const Value* v = a.get(i, name);
  return v ? v->truthy() : dflt;
}

const std::string& need_string(const Value& v, const std::string& filter) {
  if (!v.is_string()) throw_render_error("filter '" + filter + "' needs a string, got " + v.type_name());
  return v.as_string();
}

// `attribute` may be dotted ("function.name") or an index ("0").
Value attribute_of(const Value& v, const std::string& attribute) {
  Value cur = v;
  size_t start = 0;
  while (start <= attribute.size()) {
    size_t dot = attribute.find('.', start);
    if (dot == std::string::npos) dot = attribute.size();
    const std::string part = attribute.substr(start, dot - start);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    cur = digits ? get_item(cur, Value(decimal_count(part, "attribute index"))) : get_item(cur, Value(part));
    start = dot + 1;
  }
  return cur;
}

// Items of `v` for a filter on sequences: a dict's keys, a str's characters.
Array sequence(const Value& v, const std::string& filter) {
  if (v.is_none()) throw_render_error("filter '" + filter + "' cannot take None");
  return iterate(v);
}

// The key a sort or uniqueness compares: the attribute, lower-cased strings unless case sensitive.
Value sort_key(const Value& v, const Value& attribute, bool case_sensitive) {
  Value k = attribute.is_string() ? attribute_of(v, attribute.as_string()) : v;
  if (!case_sensitive && k.is_string()) return Value(to_lower(k.as_string()));
  return k;
}

// select / reject / selectattr / rejectattr: args after the attribute are the test and its arguments.
Value select(const Value& v, const Args& a, bool keep, bool by_attribute, const std::string& filter) {
  size_t next = 0;
  std::string attribute;
  if (by_attribute) {
    if (a.positional.empty() || !a.positional[0].is_string())
      throw_render_error("filter '" + filter + "' needs an attribute name");
    attribute = a.positional[0].as_string();
    next = 1;
  }
  std::string test;
  Args test_args;
  if (next < a.positional.size()) {
    test = need_string(a.positional[next], filter);
    test_args.positional.assign(a.positional.begin() + long(next) + 1, a.positional.end());
  }
  Array out;
  for (const Value& item : sequence(v, filter)) {
    const Value subject = by_attribute ? attribute_of(item, attribute) : item;
    const bool pass = test.empty() ? subject.truthy() : call_test(test, subject, test_args);
    if (pass == keep) out.push_back(item);
  }
  return Value(std::move(out));
}

Value map(const Value& v, const Args& a) {
  Array out;
  const Value* attribute = nullptr;
  for (const auto& [k, val] : a.keyword)
    if (k == "attribute") attribute = &val;
  const Array items = sequence(v, "map");
  if (attribute != nullptr) {
    if (!attribute->is_string() && !attribute->is_int()) throw_render_error("map: attribute must be a string or an index");
    const Value dflt = a.named("default") ? *a.named("default") : Value::undefined();
    for (const Value& item : items) {
      Value x = attribute->is_int() ? get_item(item, *attribute) : attribute_of(item, attribute->as_string());
      out.push_back(x.is_undefined() && !dflt.is_undefined() ? dflt : x);
    }
    return Value(std::move(out));
  }
  if (a.positional.empty()) throw_render_error("map needs a filter name or attribute=");
  const std::string& filter = need_string(a.positional[0], "map");
  Args rest;
  rest.positional.assign(a.positional.begin() + 1, a.positional.end());
  rest.keyword = a.keyword;
  for (const Value& item : items) out.push_back(call_filter(filter, item, rest));
  return Value(std::move(out));
}

Value dictsort(const Value& v, const Args& a) {
  if (!v.is_object()) throw_render_error(std::string("dictsort needs a dict, got ") + v.type_name());
  const bool case_sensitive = flag(a, 0, "case_sensitive", false);
  const Value by = opt(a, 1, "by");
  const bool by_value = by.is_string() && by.as_string() == "value";
  const bool reverse = flag(a, 2, "reverse", false);
  std::vector<std::pair<std::string, Value>> items = v.as_object().items;
  std::stable_sort(items.begin(), items.end(), [&](const auto& x, const auto& y) {
    const Value kx = sort_key(by_value ? x.second : Value(x.first), Value(), case_sensitive);
    const Value ky = sort_key(by_value ? y.second : Value(y.first), Value(), case_sensitive);
    const int c = compare(kx, ky);
    return reverse ? c > 0 : c < 0;
  });
  Array out;
  for (auto& [k, val] : items) out.push_back(Value(Array{Value(k), val}));
  return Value(std::move(out));
}

// Argument i (or `name`) as an integer, `dflt` when absent; anything else is a render error, not a bad_variant_access.
int64_t int_option(const Args& a, int i, const char* name, int64_t dflt, const char* filter) {
  const Value* v = a.get(i, name);
  if (v == nullptr) return dflt;
  if (!v->is_int()) throw_render_error(std::string(filter) + ": " + name + " must be an integer");
  return v->as_int();
}

// A float outside int64 (fits_int64) gives the default, as do inf and NaN.
Value to_int(const Value& v, const Args& a) {
  const Value dflt = opt(a, 0, "default");
  const int64_t base = int_option(a, 1, "base", 10, "int");
  const Value fallback = dflt.is_undefined() ? Value(int64_t(0)) : dflt;
  if (v.is_int()) return v;
  if (v.is_bool()) return Value(int64_t(v.as_bool()));
  if (v.is_float()) return fits_int64(v.as_float()) ? Value(int64_t(v.as_float())) : fallback;
  if (v.is_string()) {
    const std::string s = strip(v.as_string(), nullptr, true, true);
    try {
      size_t used = 0;
      const int64_t i = std::stoll(s, &used, int(base));
      if (used == s.size()) return Value(i);
      const double d = std::stod(s, &used);
      if (used == s.size() && base == 10 && fits_int64(d)) return Value(int64_t(d));
    } catch (const std::exception&) {
    }
  }
  return fallback;
}

Value to_float(const Value& v, const Args& a) {
  const Value dflt = opt(a, 0, "default");
  const Value fallback = dflt.is_undefined() ? Value(0.0) : dflt;
  if (v.is_float()) return v;
  if (v.is_int() || v.is_bool()) return Value(v.as_number());
  if (v.is_string()) {
    const std::string s = strip(v.as_string(), nullptr, true, true);
    try {
      size_t used = 0;
      const double d = std::stod(s, &used);
      if (used == s.size()) return Value(d);
    } catch (const std::exception&) {
    }
  }
  return fallback;
}

Value round_filter(const Value& v, const Args& a) {
  if (!v.is_number() && !v.is_bool()) throw_render_error(std::string("round needs a number, got ") + v.type_name());
  const int64_t precision = int_option(a, 0, "precision", 0, "round");
  const Value method = opt(a, 1, "method");
  const std::string how = method.is_string() ? method.as_string() : "common";
  const double scale = std::pow(10.0, double(precision));
  const double x = v.as_number() * scale;
  const double r = how == "ceil" ? std::ceil(x) : how == "floor" ? std::floor(x) : std::round(x);
  return Value(r / scale);
}

Value min_max(const Value& v, const Args& a, bool want_max) {
  const Array items = sequence(v, want_max ? "max" : "min");
  if (items.empty()) return Value::undefined();
  const bool case_sensitive = flag(a, 0, "case_sensitive", false);
  const Value attribute = opt(a, 1, "attribute");
  const Value* best = &items[0];
  for (const Value& x : items) {
    const int c = compare(sort_key(x, attribute, case_sensitive), sort_key(*best, attribute, case_sensitive));
    if (want_max ? c > 0 : c < 0) best = &x;
  }
  return *best;
}

}  // namespace

Value call_filter(const std::string& name, const Value& v, const Args& a) {
  if (name == "safe" || (name == "string" && v.is_string())) return v;
  if (name == "string") return Value(v.str());
  if (name == "trim") {
    const Value chars = opt(a, 0, "chars");
    return Value(strip(v.str(), chars.is_string() ? &chars.as_string() : nullptr, true, true));
  }
  if (name == "upper") return Value(to_upper(v.str()));
  if (name == "lower") return Value(to_lower(v.str()));
  if (name == "title") return Value(to_title(v.str()));
  if (name == "capitalize") return Value(capitalize(v.str()));
  if (name == "length" || name == "count") {
    if (v.is_string()) return Value(int64_t(utf8_length(v.as_string())));
    if (v.is_array()) return Value(int64_t(v.as_array().size()));
    if (v.is_object()) return Value(int64_t(v.as_object().items.size()));
    if (v.is_undefined()) return Value(int64_t(0));
    throw_render_error(std::string("object of type '") + v.type_name() + "' has no len()");
  }
  if (name == "tojson") {
    // transformers' signature: tojson(ensure_ascii=False, indent=None, separators=None, sort_keys=False).
    JsonFormat f;
    f.ensure_ascii = flag(a, 0, "ensure_ascii", false);
    const Value indent = opt(a, 1, "indent");
    if (indent.is_int()) f.indent = int(std::max<int64_t>(0, indent.as_int()));
    else if (indent.is_string()) throw_render_error("tojson: indent must be an integer");
    const Value separators = opt(a, 2, "separators");
    if (separators.is_array()) {
      if (separators.as_array().size() != 2) throw_render_error("tojson: separators must be a pair of strings");
      f.item_separator = separators.as_array()[0].str();
      f.key_separator = separators.as_array()[1].str();
    }
    f.sort_keys = flag(a, 3, "sort_keys", false);
    return Value(to_json(v, f));
  }
  if (name == "default" || name == "d") {
    const bool boolean = flag(a, 1, "boolean", false);
    if (v.is_undefined() || (boolean && !v.truthy())) {
      const Value* d = a.get(0, "default_value");
      return d ? *d : Value("");
    }
    return v;
  }
  if (name == "join") {
    const Value sep = opt(a, 0, "d");
    const Value attribute = opt(a, 1, "attribute");
    std::string out;
    bool first = true;
    for (const Value& x : sequence(v, name)) {
      if (!first) out += sep.is_undefined() ? "" : sep.str();
      first = false;
      out += (attribute.is_string() ? attribute_of(x, attribute.as_string()) : x).str();
    }
    return Value(std::move(out));
  }
  if (name == "replace") {
    const Value* from = a.get(0, "old");
    const Value* to = a.get(1, "new");
    if (from == nullptr || to == nullptr) throw_render_error("replace needs the old and the new string");
    const Value count = opt(a, 2, "count");
    return Value(replace(v.str(), from->str(), to->str(), count.is_int() ? count.as_int() : -1));
  }
  if (name == "first" || name == "last") {
    if (v.is_string()) {
      const std::vector<std::string> chars = utf8_chars(v.as_string());
      if (chars.empty()) return Value::undefined();
      return Value(name == "first" ? chars.front() : chars.back());
    }
    const Array items = sequence(v, name);
    if (items.empty()) return Value::undefined();
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") return Value(sequence(v, name));
  if (name == "reverse") {
    if (v.is_string()) {
      std::vector<std::string> chars = utf8_chars(v.as_string());
      std::string out;
      for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
      return Value(std::move(out));
    }
    Array items = sequence(v, name);
    std::reverse(items.begin(), items.end());
    return Value(std::move(items));
  }
  if (name == "map") return map(v, a);
  if (name == "select") return select(v, a, true, false, name);
  if (name == "reject") return select(v, a, false, false, name);
  if (name == "selectattr") return select(v, a, true, true, name);
  if (name == "rejectattr") return select(v, a, false, true, name);
  if (name == "items") {
    if (v.is_undefined()) return Value(Array{});
    if (!v.is_object()) throw_render_error(std::string("items needs a dict, got ") + v.type_name());
    Array out;
    for (const auto& [k, val] : v.as_object().items) out.push_back(Value(Array{Value(k), val}));
    return Value(std::move(out));
  }
  if (name == "dictsort") return dictsort(v, a);
  if (name == "int") return to_int(v, a);
  if (name == "float") return to_float(v, a);
  if (name == "abs") {
    if (v.is_int() && v.as_int() == INT64_MIN) throw_render_error("integer overflow in abs()");
    if (v.is_int()) return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
    if (v.is_float()) return Value(std::fabs(v.as_float()));
    throw_render_error(std::string("bad operand type for abs(): '") + v.type_name() + "'");
  }
  if (name == "round") return round_filter(v, a);
  if (name == "indent") {
    const Value width = opt(a, 0, "width");
    const int64_t spaces = width.is_int() ? width.as_int() : 4;
    if (!width.is_string() && (spaces < 0 || spaces > kMaxFormatCount))
      throw_render_error("indent: width out of range: " + std::to_string(spaces));
    const std::string prefix = width.is_string() ? width.as_string() : std::string(size_t(spaces), ' ');
    return Value(indent_lines(v.str(), prefix, flag(a, 1, "first", false), flag(a, 2, "blank", false)));
  }
  if (name == "unique") {
    const bool case_sensitive = flag(a, 0, "case_sensitive", false);
    const Value attribute = opt(a, 1, "attribute");
    Array out, keys;
    for (const Value& x : sequence(v, name)) {
      const Value k = sort_key(x, attribute, case_sensitive);
      if (std::none_of(keys.begin(), keys.end(), [&](const Value& y) { return equals(k, y); })) {
        keys.push_back(k);
        out.push_back(x);
      }
    }
    return Value(std::move(out));
  }
  if (name == "sort") {
    const bool reverse = flag(a, 0, "reverse", false);
    const bool case_sensitive = flag(a, 1, "case_sensitive", false);
    const Value attribute = opt(a, 2, "attribute");
    Array items = sequence(v, name);
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
      const int c = compare(sort_key(x, attribute, case_sensitive), sort_key(y, attribute, case_sensitive));
      return reverse ? c > 0 : c < 0;
    });
    return Value(std::move(items));
  }
  if (name == "sum") {
    const Value attribute = opt(a, 0, "attribute");
    Value total = a.get(1, "start") ? *a.get(1, "start") : Value(int64_t(0));
    for (const Value& x : sequence(v, name)) {
      const Value y = attribute.is_string() ? attribute_of(x, attribute.as_string()) : x;
      if (!(y.is_number() || y.is_bool()) || !(total.is_number() || total.is_bool()))
        throw_render_error("sum needs numbers");
      int64_t sum = 0;
      if (total.is_int() && y.is_int() && __builtin_add_overflow(total.as_int(), y.as_int(), &sum))
        throw_render_error("integer overflow in sum");
      total = total.is_int() && y.is_int() ? Value(sum) : Value(total.as_number() + y.as_number());
    }
    return total;
  }
  if (name == "min") return min_max(v, a, false);
  if (name == "max") return min_max(v, a, true);
  if (name == "attr") {
    const Value* n = a.get(0, "name");
    if (n == nullptr) throw_render_error("attr needs a name");
    return get_attr(v, n->str());
  }
  if (name == "format") {
    Array values = a.positional;
    if (!a.keyword.empty()) {
      Object kw;
      for (const auto& [k, val] : a.keyword) kw.set(k, val);
      return Value(percent_format(need_string(v, name), Value(std::move(kw))));
    }
    return Value(percent_format(need_string(v, name), Value(std::move(values))));
  }
  if (name == "wordcount") return Value(int64_t(split(v.str(), nullptr, -1, false).size()));
  if (name == "center") {
    const Value width = opt(a, 0, "width");
    return Value(pad(v.str(), width.is_int() ? width.as_int() : 80, "center", " "));
  }
  if (name == "escape" || name == "e" || name == "forceescape") return Value(html_escape(v.str()));
  if (name == "batch") {
    const Value size = opt(a, 0, "linecount");
    if (!size.is_int() || size.as_int() <= 0) throw_render_error("batch needs a positive size");
    const Value fill = opt(a, 1, "fill_with");
    if (!fill.is_undefined() && size.as_int() > kMaxFormatCount)
      throw_render_error("batch: linecount too large to fill");
    Array out, cur;
    for (const Value& x : sequence(v, name)) {
      cur.push_back(x);
      if (int64_t(cur.size()) == size.as_int()) out.push_back(Value(std::move(cur))), cur = Array{};
    }
    if (!cur.empty()) {
      if (!fill.is_undefined())
        while (int64_t(cur.size()) < size.as_int()) cur.push_back(fill);
      out.push_back(Value(std::move(cur)));
    }
    return Value(std::move(out));
  }
  throw_render_error("no filter named '" + name + "'");
}

}  // namespace inflight::server::jinja

// Jinja's tests (`x is defined`, `x is divisibleby 3`, ...).
#include <cmath>

#include "server/jinja/builtins.h"

namespace inflight::server::jinja {

namespace {

const Value& other(const Args& a, const std::string& test) {
  const Value* v = a.get(0, "other");
  if (v == nullptr) throw_render_error("test '" + test + "' needs an argument");
  return *v;
}

}  // namespace

bool call_test(const std::string& name, const Value& v, const Args& a) {
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return v.is_number() || v.is_bool();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_object();
  if (name == "iterable") return v.is_array() || v.is_object() || v.is_string();
  if (name == "sequence") return v.is_array() || v.is_object() || v.is_string();
  if (name == "callable") return v.is_function();
  if (name == "escaped") return false;
  if (name == "sameas") {
    const Value& o = other(a, name);
    if (v.identity() != nullptr || o.identity() != nullptr) return v.identity() == o.identity();
    if (v.type() != o.type()) return false;
    return equals(v, o);
  }
  if (name == "equalto" || name == "eq" || name == "==") return equals(v, other(a, name));
  if (name == "ne" || name == "!=") return !equals(v, other(a, name));
  if (name == "lt" || name == "lessthan" || name == "<") return compare(v, other(a, name)) < 0;
  if (name == "le" || name == "<=") return compare(v, other(a, name)) <= 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return compare(v, other(a, name)) > 0;
  if (name == "ge" || name == ">=") return compare(v, other(a, name)) >= 0;
  if (name == "in") return contains(other(a, name), v);
  if (name == "lower") return v.is_string() && v.as_string() == [&] {
    std::string s = v.as_string();
    for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
    return s;
  }();
  if (name == "upper") return v.is_string() && v.as_string() == [&] {
    std::string s = v.as_string();
    for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
    return s;
  }();
  if (name == "even" || name == "odd" || name == "divisibleby") {
    if (!v.is_int() && !v.is_bool()) throw_render_error("test '" + name + "' needs an integer, got " + v.type_name());
    const int64_t x = v.is_bool() ? v.as_bool() : v.as_int();
    if (name == "even") return x % 2 == 0;
    if (name == "odd") return x % 2 != 0;
    const Value& d = other(a, name);
    if (!d.is_int() || d.as_int() == 0) throw_render_error("divisibleby needs a non-zero integer");
    return x % d.as_int() == 0;
  }
  throw_render_error("no test named '" + name + "'");
}

}  // namespace inflight::server::jinja

#include "server/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace inflight::server::jinja {

void throw_render_error(const std::string& message) { throw Error(Error::Kind::Render, message); }

const Value* Object::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

Value* Object::find(std::string_view key) {
  for (auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

void Object::set(const std::string& key, Value value) {
  if (Value* v = find(key)) *v = std::move(value);
  else items.emplace_back(key, std::move(value));
}

const Value* Args::get(size_t index, std::string_view name) const {
  if (index < positional.size()) return &positional[index];
  return named(name);
}

const Value* Args::named(std::string_view name) const {
  for (const auto& [k, v] : keyword)
    if (k == name) return &v;
  return nullptr;
}

namespace {

thread_local ContainerArena* innermost_arena = nullptr;
thread_local int value_depth = 0;

// One level deeper into a list, dict or namespace (printing, comparing, copying, JSON).
struct Nest {
  Nest() {
    ContainerArena::count_visit();
    if (++value_depth > kMaxValueDepth) {
      --value_depth;
      throw_render_error("a list, dict or namespace nested more than " + std::to_string(kMaxValueDepth) +
                         " deep (one that holds itself?)");
    }
  }
  ~Nest() { --value_depth; }
  Nest(const Nest&) = delete;
  Nest& operator=(const Nest&) = delete;
};

}  // namespace

Value::Value(std::string s) {
  ContainerArena::count_string(s.size());
  v_ = std::make_shared<const std::string>(std::move(s));
}

Value::Value(Array a) {
  ContainerArena::count_items(a.size());
  v_ = std::make_shared<Array>(std::move(a));
  ContainerArena::track(std::get<std::shared_ptr<Array>>(v_));
}

Value::Value(Object o) : v_(std::make_shared<Object>(std::move(o))) {
  ContainerArena::track(std::get<std::shared_ptr<Object>>(v_));
}

ContainerArena::ContainerArena() : outer_(innermost_arena) { innermost_arena = this; }

ContainerArena::~ContainerArena() {
  innermost_arena = outer_;
  // Emptying a container may free others (their weak pointers expire); what stays alive loses its contents,
  // and with them every cycle through it. Swapping with an empty temporary frees the contents at the end of
  // the statement, while the locked pointer still keeps the container itself alive.
  for (const auto& w : arrays_)
    if (std::shared_ptr<Array> a = w.lock()) Array().swap(*a);
  for (const auto& w : objects_)
    if (std::shared_ptr<Object> o = w.lock()) decltype(o->items)().swap(o->items);
}

void ContainerArena::track(const std::shared_ptr<Array>& a) {
  if (ContainerArena* arena = innermost_arena) {
    arena->arrays_.push_back(a);
    if (arena->arrays_.size() + arena->objects_.size() >= arena->compact_at_) arena->compact();
  }
}

void ContainerArena::track(const std::shared_ptr<Object>& o) {
  if (ContainerArena* arena = innermost_arena) {
    arena->objects_.push_back(o);
    if (arena->arrays_.size() + arena->objects_.size() >= arena->compact_at_) arena->compact();
  }
}

// Adds n to the innermost arena's `count`, if there is an arena; past `limit`, a render error saying
// `before` (limit in Mi) `after`.
void ContainerArena::charge(size_t ContainerArena::*count, size_t n, size_t limit, const char* before,
                            const char* after) {
  if (ContainerArena* arena = innermost_arena)
    if ((arena->*count += n) > limit) throw_render_error(before + std::to_string(limit >> 20) + after);
}

void ContainerArena::count_string(size_t bytes) {
  charge(&ContainerArena::string_bytes_, bytes, kMaxRenderStringBytes, "the template made more than ",
         " MiB of strings (one that grows without bound?)");
}

void ContainerArena::count_items(size_t n) {
  charge(&ContainerArena::items_, n, kMaxRenderItems, "the template made more than ",
         " Mi list items (a list that grows without bound?)");
}

void ContainerArena::count_visit() {
  charge(&ContainerArena::visits_, 1, kMaxRenderVisits, "the template's lists and dicts took more than ",
         " Mi steps to print, compare or copy (a list holding the same list many times over?)");
}

// Drops the records of containers already freed (a weak pointer keeps a make_shared block's memory), so
// the arena holds about twice what is alive, not everything the render ever made.
void ContainerArena::compact() {
  std::erase_if(arrays_, [](const auto& w) { return w.expired(); });
  std::erase_if(objects_, [](const auto& w) { return w.expired(); });
  compact_at_ = std::max<size_t>(1024, 2 * (arrays_.size() + objects_.size()));
}

Value deep_copy(const Value& v) {
  if (v.is_array()) {
    Nest nest;
    Array out;
    out.reserve(v.as_array().size());
    for (const Value& e : v.as_array()) out.push_back(deep_copy(e));
    return Value(std::move(out));
  }
  if (v.is_object()) {
    Nest nest;
    Object out;
    out.is_namespace = v.as_object().is_namespace;
    out.items.reserve(v.as_object().items.size());
    for (const auto& [k, e] : v.as_object().items) out.items.emplace_back(k, deep_copy(e));
    return Value(std::move(out));
  }
  return v;
}

const void* Value::identity() const {
  if (is_array()) return &as_array();
  if (is_object()) return &as_object();
  if (is_function()) return &as_function();
  return nullptr;
}

bool Value::truthy() const {
  switch (type()) {
    case Type::Undefined:
    case Type::None: return false;
    case Type::Bool: return as_bool();
    case Type::Int: return as_int() != 0;
    case Type::Float: return as_float() != 0.0;
    case Type::String: return !as_string().empty();
    case Type::Array: return !as_array().empty();
    case Type::Object: return !as_object().items.empty();
    case Type::Function: return true;
  }
  return false;
}

const char* Value::type_name() const {
  switch (type()) {
    case Type::Undefined: return "undefined";
    case Type::None: return "NoneType";
    case Type::Bool: return "bool";
    case Type::Int: return "int";
    case Type::Float: return "float";
    case Type::String: return "str";
    case Type::Array: return "list";
    case Type::Object: return as_object().is_namespace ? "Namespace" : "dict";
    case Type::Function: return "function";
  }
  return "?";
}

std::string format_float(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  char buf[64];
  // Python's repr switches to exponent notation below 1e-4 and from 1e16.
  const double a = std::fabs(f);
  const bool exponent = a != 0.0 && (a < 1e-4 || a >= 1e16);
  auto r = exponent ? std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific)
                    : std::to_chars(buf, buf + sizeof buf, f, std::chars_format::fixed);
  std::string s(buf, r.ptr);
  if (!exponent && s.find('.') == std::string::npos) s += ".0";
  return s;
}

namespace {

std::string quote_python(const std::string& s) {
  // repr() prefers single quotes unless the string has one and no double quote.
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  for (char c : s) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c == q) out += '\\';
        out += c;
    }
  }
  return out + q;
}

void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  char buf[16];
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || (ensure_ascii && c == 0x7F)) {
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else if (c >= 0x80 && ensure_ascii) {
          // One UTF-8 sequence to its code point, written as \uXXXX (a surrogate pair beyond the BMP).
          const size_t n = (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
          uint32_t cp = n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : n == 4 ? (c & 0x07) : 0xFFFD;
          for (size_t k = 1; k < n && i + k < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
          i += n - 1;
          if (cp >= 0x10000) {
            cp -= 0x10000;
            std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
          } else {
            std::snprintf(buf, sizeof buf, "\\u%04x", cp);
          }
          out += buf;
        } else {
          out += char(c);
        }
    }
  }
  out += '"';
}

void json_value(std::string& out, const Value& v, const JsonFormat& f, int depth) {
  const std::string& item_sep = !f.item_separator.empty() ? f.item_separator : f.indent >= 0 ? std::string(",") : std::string(", ");
  const std::string& key_sep = !f.key_separator.empty() ? f.key_separator : std::string(": ");
  auto newline = [&](int d) {
    if (f.indent < 0) return;
    out += '\n';
    out.append(size_t(f.indent) * size_t(d), ' ');
  };
  switch (v.type()) {
    case Value::Type::Undefined:
    case Value::Type::None: out += "null"; return;
    case Value::Type::Bool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Type::Int: out += std::to_string(v.as_int()); return;
    case Value::Type::Float: {
      const double x = v.as_float();
      out += std::isnan(x) ? "NaN" : std::isinf(x) ? (x > 0 ? "Infinity" : "-Infinity") : format_float(x);
      return;
    }
    case Value::Type::String: json_string(out, v.as_string(), f.ensure_ascii); return;
    case Value::Type::Array: {
      Nest nest;
      const Array& a = v.as_array();
      out += '[';
      for (size_t i = 0; i < a.size(); ++i) {
        if (i > 0) out += item_sep;
        newline(depth + 1);
        json_value(out, a[i], f, depth + 1);
      }
      if (!a.empty()) newline(depth);
      out += ']';
      return;
    }
    case Value::Type::Object: {
      Nest nest;
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.as_object().items) items.push_back(&kv);
      if (f.sort_keys)
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += item_sep;
        newline(depth + 1);
        json_string(out, items[i]->first, f.ensure_ascii);
        out += key_sep;
        json_value(out, items[i]->second, f, depth + 1);
      }
      if (!items.empty()) newline(depth);
      out += '}';
      return;
    }
    case Value::Type::Function: throw_render_error("Object of type function is not JSON serializable");
  }
}

template <class Json>
Value from_json_impl(const Json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value(j.template get<bool>());
    case nlohmann::json::value_t::number_integer: return Value(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: return Value(int64_t(j.template get<uint64_t>()));
    case nlohmann::json::value_t::number_float: return Value(j.template get<double>());
    case nlohmann::json::value_t::string: return Value(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      Array a;
      a.reserve(j.size());
      for (const auto& e : j) a.push_back(from_json_impl(e));
      return Value(std::move(a));
    }
    case nlohmann::json::value_t::object: {
      Object o;
      for (auto it = j.begin(); it != j.end(); ++it) o.items.emplace_back(it.key(), from_json_impl(it.value()));
      return Value(std::move(o));
    }
    default: return Value::none();
  }
}

}  // namespace

std::string Value::str() const {
  switch (type()) {
    case Type::Undefined: return "";
    case Type::None: return "None";
    case Type::Bool: return as_bool() ? "True" : "False";
    case Type::Int: return std::to_string(as_int());
    case Type::Float: return format_float(as_float());
    case Type::String: return as_string();
    default: return repr();
  }
}

std::string Value::repr() const {
  switch (type()) {
    case Type::String: return quote_python(as_string());
    case Type::Array: {
      Nest nest;
      std::string out = "[";
      const Array& a = as_array();
      for (size_t i = 0; i < a.size(); ++i) out += (i ? ", " : "") + a[i].repr();
      return out + "]";
    }
    case Type::Object: {
      Nest nest;
      std::string out = as_object().is_namespace ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, v] : as_object().items) {
        out += (first ? "" : ", ") + quote_python(k) + ": " + v.repr();
        first = false;
      }
      return out + (as_object().is_namespace ? "}>" : "}");
    }
    case Type::Function: return "<function>";
    default: return str();
  }
}

bool equals(const Value& a, const Value& b) {
  if ((a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool())) {
    if (a.is_int() && b.is_int()) return a.as_int() == b.as_int();
    return a.as_number() == b.as_number();
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Value::Type::Undefined:
    case Value::Type::None: return true;
    case Value::Type::String: return a.as_string() == b.as_string();
    case Value::Type::Array: {
      Nest nest;
      const Array &x = a.as_array(), &y = b.as_array();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!equals(x[i], y[i])) return false;
      return true;
    }
    case Value::Type::Object: {
      Nest nest;
      const Object &x = a.as_object(), &y = b.as_object();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* w = y.find(k);
        if (w == nullptr || !equals(v, *w)) return false;
      }
      return true;
    }
    case Value::Type::Function: return a.identity() == b.identity();
    default: return false;
  }
}

int compare(const Value& a, const Value& b) {
  if ((a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool())) {
    if (a.is_int() && b.is_int()) return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
    const double x = a.as_number(), y = b.as_number();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_array() && b.is_array()) {
    Nest nest;
    const Array &x = a.as_array(), &y = b.as_array();
    for (size_t i = 0; i < std::min(x.size(), y.size()); ++i)
      if (const int c = compare(x[i], y[i]); c != 0) return c;
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  throw_render_error(std::string("'<' not supported between instances of '") + a.type_name() + "' and '" +
                     b.type_name() + "'");
}

Value from_json(const nlohmann::ordered_json& j) { return from_json_impl(j); }
Value from_json(const nlohmann::json& j) { return from_json_impl(j); }

std::string to_json(const Value& v, const JsonFormat& format) {
  std::string out;
  json_value(out, v, format, 0);
  return out;
}

std::vector<std::string> utf8_chars(std::string_view s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
    n = std::min(n, s.size() - i);
    out.emplace_back(s.substr(i, n));
    i += n;
  }
  return out;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

}  // namespace inflight::server::jinja

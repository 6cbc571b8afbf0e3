// Jinja values, with Python's semantics: None, bool, int, float, str, list, dict, callables and
// undefined. Lists and dicts are shared by reference, as in Python (`list.append` and `namespace`
// assignment mutate the one object every name refers to). Dicts keep insertion order.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace inflight::server::jinja {

// Every failure of a template: its syntax, an error while rendering (an undefined call, a wrong
// type), or the template's own raise_exception. The message says what and, for syntax, the line.
class Error : public std::runtime_error {
 public:
  enum class Kind { Syntax, Render, Raised };
  Error(Kind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

[[noreturn]] void throw_render_error(const std::string& message);

class Value;
using Array = std::vector<Value>;

struct Object {
  std::vector<std::pair<std::string, Value>> items;  // insertion order
  bool is_namespace = false;                        // namespace(): attributes may be assigned

  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  void set(const std::string& key, Value value);
};

// Positional and keyword arguments of a call.
struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // The argument at `index` or named `name`; nullptr when absent.
  const Value* get(size_t index, std::string_view name) const;
  // The keyword argument `name` (keyword-only parameters); nullptr when absent.
  const Value* named(std::string_view name) const;
  size_t size() const;  // defined below Value (a vector of an incomplete type has no size yet)
};

using Function = std::function<Value(const Args&)>;

struct Undefined {
  std::string name;  // what was looked up, for error messages
};
struct None {};

class Value {
 public:
  enum class Type { Undefined, None, Bool, Int, Float, String, Array, Object, Function };

  Value() : v_(Undefined{}) {}
  static Value undefined(std::string name = {}) { return Value(Undefined{std::move(name)}); }
  static Value none() { return Value(None{}); }
  Value(bool b) : v_(b) {}
  Value(int i) : v_(int64_t(i)) {}
  Value(int64_t i) : v_(i) {}
  Value(size_t i) : v_(int64_t(i)) {}
  Value(double f) : v_(f) {}
  Value(std::string s);  // counted against the render's string budget (ContainerArena::count_string)
  Value(const char* s) : Value(std::string(s)) {}
  Value(std::string_view s) : Value(std::string(s)) {}
  Value(Array a);   // a new list (tracked by the render's ContainerArena)
  Value(Object o);  // a new dict or namespace (ditto)
  Value(std::shared_ptr<Array> a) : v_(std::move(a)) {}
  Value(std::shared_ptr<Object> o) : v_(std::move(o)) {}
  static Value function(Function f) { return Value(std::make_shared<const Function>(std::move(f))); }

  Type type() const { return Type(v_.index()); }
  bool is_undefined() const { return type() == Type::Undefined; }
  bool is_none() const { return type() == Type::None; }
  bool is_bool() const { return type() == Type::Bool; }
  bool is_int() const { return type() == Type::Int; }
  bool is_float() const { return type() == Type::Float; }
  bool is_number() const { return is_int() || is_float(); }
  bool is_string() const { return type() == Type::String; }
  bool is_array() const { return type() == Type::Array; }
  bool is_object() const { return type() == Type::Object; }
  bool is_function() const { return type() == Type::Function; }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return std::get<int64_t>(v_); }
  double as_float() const { return std::get<double>(v_); }
  double as_number() const { return is_int() ? double(as_int()) : is_bool() ? double(as_bool()) : as_float(); }
  const std::string& as_string() const { return *std::get<std::shared_ptr<const std::string>>(v_); }
  Array& as_array() const { return *std::get<std::shared_ptr<Array>>(v_); }
  Object& as_object() const { return *std::get<std::shared_ptr<Object>>(v_); }
  const Function& as_function() const { return *std::get<std::shared_ptr<const Function>>(v_); }
  const std::string& undefined_name() const { return std::get<Undefined>(v_).name; }
  // The same list or dict (identity, for `is sameas`).
  const void* identity() const;

  bool truthy() const;
  // Python's str(): what {{ value }} prints ("" for undefined).
  std::string str() const;
  // Python's repr(): strings quoted (inside lists and dicts).
  std::string repr() const;
  // Python's name of the type, for error messages ("str", "int", "list", "dict", ...).
  const char* type_name() const;

 private:
  explicit Value(Undefined u) : v_(std::move(u)) {}
  explicit Value(None n) : v_(n) {}
  explicit Value(std::shared_ptr<const Function> f) : v_(std::move(f)) {}
  std::variant<Undefined, None, bool, int64_t, double, std::shared_ptr<const std::string>, std::shared_ptr<Array>,
               std::shared_ptr<Object>, std::shared_ptr<const Function>>
      v_;
};

// The bytes of the strings one render makes, in all, at most: a template that grows a string without bound (a
// value's JSON stored back into the value, longer each turn of a loop) stops with a render error instead of
// taking the server's memory and time. As much as a render may write, about a hundred times a long prompt.
inline constexpr size_t kMaxRenderStringBytes = size_t(64) << 20;
// The list items one render makes or adds, in all, at most (about 160 MiB of values): a list concatenated
// with itself, or extended by itself, in a loop stops the same way. (A dict grows by a key at a time.)
inline constexpr size_t kMaxRenderItems = size_t(4) << 20;
// The lists, dicts and namespaces one render's printing, comparing, copying and JSON visit, in all, at most: a
// value built as a graph (a list holding the same list twice, forty levels deep) has exponentially many paths.
inline constexpr size_t kMaxRenderVisits = size_t(4) << 20;

// The lists, dicts and namespaces one render makes, and its budgets (above). A template may build
// reference cycles (`{% set ns.me = ns %}`, `l.append(l)`, a list holding its own bound `append`), which
// reference counting alone would never free; when the render ends, the arena empties every container of the
// render still alive, which breaks them all. One per render, on the rendering thread; renders may nest (a
// template's own render inside a call) and each arena sees only what is made while it is the innermost.
class ContainerArena {
 public:
  ContainerArena();
  ~ContainerArena();
  ContainerArena(const ContainerArena&) = delete;
  ContainerArena& operator=(const ContainerArena&) = delete;

  // Records a new container in this thread's innermost arena, if any.
  static void track(const std::shared_ptr<Array>& a);
  static void track(const std::shared_ptr<Object>& o);
  // Add to this thread's innermost arena's counts, if any, with a render error past their limits: a new
  // string's bytes, list items made or added, a list, dict or namespace visited.
  static void count_string(size_t bytes);
  static void count_items(size_t n);
  static void count_visit();

 private:
  void compact();
  static void charge(size_t ContainerArena::*count, size_t n, size_t limit, const char* before, const char* after);
  std::vector<std::weak_ptr<Array>> arrays_;
  std::vector<std::weak_ptr<Object>> objects_;
  size_t compact_at_ = 1024;
  size_t string_bytes_ = 0, items_ = 0, visits_ = 0;
  ContainerArena* outer_;
};

// A copy of `v` whose lists, dicts and namespaces are new ones, all the way down (functions are shared):
// what a render starts from, so that the template can neither change its caller's values nor tie them
// into a cycle. Throws a render error for values nested deeper than kMaxValueDepth.
Value deep_copy(const Value& v);

// Lists, dicts and namespaces nest at most this deep when printed, compared, copied or turned into JSON: a
// container holding itself is a render error there, never an endless recursion.
inline constexpr int kMaxValueDepth = 256;

// Python's == (1 == 1.0, lists and dicts by content) and ordering (numbers, strings, lists).
bool equals(const Value& a, const Value& b);
// <0, 0, >0; throws a render error for values Python cannot order.
int compare(const Value& a, const Value& b);

// JSON in (objects keep their key order) and out. to_json follows Python's json.dumps as transformers'
// `tojson` calls it: by default ensure_ascii off, separators ", " and ": " (with an indent: "," and ": "),
// keys in their order.
struct JsonFormat {
  int indent = -1;  // < 0: one line
  bool sort_keys = false;
  bool ensure_ascii = false;  // non-ASCII as \uXXXX escapes (surrogate pairs beyond the BMP)
  std::string item_separator, key_separator;  // empty: the defaults above
};
Value from_json(const nlohmann::ordered_json& j);
Value from_json(const nlohmann::json& j);
std::string to_json(const Value& v, const JsonFormat& format = {});

// Python's float repr: shortest round-trip digits, "1.0" for integral values, "inf", "nan".
std::string format_float(double f);

// UTF-8 code points of a string (each as its own bytes): Python indexes, slices and counts strings
// by code point.
std::vector<std::string> utf8_chars(std::string_view s);
size_t utf8_length(std::string_view s);

inline size_t Args::size() const { return positional.size() + keyword.size(); }

}  // namespace inflight::server::jinja

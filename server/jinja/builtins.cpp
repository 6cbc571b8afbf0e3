// Python's operations on values and the methods of str, dict and list.
#include "server/jinja/builtins.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "server/jinja/string_ops.h"

namespace inflight::server::jinja {

namespace {

int64_t index_arg(const Value& v, const char* what) {
  if (v.is_int()) return v.as_int();
  if (v.is_bool()) return v.as_bool();
  throw_render_error(std::string(what) + " must be an integer, got " + v.type_name());
}

// Python's slice.indices(): clamps start / stop for a sequence of `n` items.
void slice_indices(int64_t n, const Value& start, const Value& stop, const Value& step, int64_t* b, int64_t* e,
                   int64_t* s) {
  *s = step.is_undefined() || step.is_none() ? 1 : index_arg(step, "slice step");
  if (*s == 0) throw_render_error("slice step cannot be zero");
  auto clamp = [&](const Value& v, int64_t dflt) {
    if (v.is_undefined() || v.is_none()) return dflt;
    int64_t i = index_arg(v, "slice index");
    if (i < 0) i += n;
    if (*s > 0) return std::clamp<int64_t>(i, 0, n);
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  *b = clamp(start, *s > 0 ? 0 : n - 1);
  *e = clamp(stop, *s > 0 ? n : -1);
}

Value bound(Function f) { return Value::function(std::move(f)); }

const Value& arg(const Args& a, size_t i, const char* name, const char* method) {
  const Value* v = a.get(i, name);
  if (v == nullptr) throw_render_error(std::string(method) + "() missing argument '" + name + "'");
  return *v;
}

Value opt(const Args& a, size_t i, const char* name) {
  const Value* v = a.get(i, name);
  return v ? *v : Value::undefined();
}

const std::string& str_arg(const Args& a, size_t i, const char* name, const char* method) {
  const Value& v = arg(a, i, name, method);
  if (!v.is_string())
    throw_render_error(std::string(method) + "() argument '" + name + "' must be str, not " + v.type_name());
  return v.as_string();
}

Value string_method(const std::string& s, const std::string& name) {
  auto strip_fn = [s](bool left, bool right) {
    return bound([s, left, right](const Args& a) {
      const Value chars = opt(a, 0, "chars");
      return Value(strip(s, chars.is_string() ? &chars.as_string() : nullptr, left, right));
    });
  };
  if (name == "strip") return strip_fn(true, true);
  if (name == "lstrip") return strip_fn(true, false);
  if (name == "rstrip") return strip_fn(false, true);
  if (name == "upper") return bound([s](const Args&) { return Value(to_upper(s)); });
  if (name == "lower") return bound([s](const Args&) { return Value(to_lower(s)); });
  if (name == "title") return bound([s](const Args&) { return Value(to_title(s)); });
  if (name == "capitalize") return bound([s](const Args&) { return Value(capitalize(s)); });
  if (name == "swapcase") return bound([s](const Args&) { return Value(swap_case(s)); });
  if (name == "split" || name == "rsplit") {
    const bool from_right = name == "rsplit";
    return bound([s, from_right](const Args& a) {
      const Value sep = opt(a, 0, "sep");
      const Value max = opt(a, 1, "maxsplit");
      const int64_t maxsplit = max.is_undefined() ? -1 : index_arg(max, "maxsplit");
      Array out;
      for (std::string& part : split(s, sep.is_string() ? &sep.as_string() : nullptr, maxsplit, from_right))
        out.emplace_back(std::move(part));
      return Value(std::move(out));
    });
  }
  if (name == "splitlines")
    return bound([s](const Args&) {
      Array out;
      for (std::string& line : split_lines(s)) out.emplace_back(std::move(line));
      return Value(std::move(out));
    });
  if (name == "startswith" || name == "endswith") {
    const bool start = name == "startswith";
    return bound([s, start](const Args& a) {
      const Value& p = arg(a, 0, "prefix", start ? "startswith" : "endswith");
      auto test = [&](const Value& x) {
        if (!x.is_string()) throw_render_error("startswith/endswith takes a str or a tuple of str");
        const std::string& t = x.as_string();
        return start ? s.compare(0, t.size(), t) == 0 && s.size() >= t.size()
                     : s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
      };
      if (p.is_array()) return Value(std::any_of(p.as_array().begin(), p.as_array().end(), test));
      return Value(test(p));
    });
  }
  if (name == "replace")
    return bound([s](const Args& a) {
      const Value count = opt(a, 2, "count");
      return Value(replace(s, str_arg(a, 0, "old", "replace"), str_arg(a, 1, "new", "replace"),
                           count.is_undefined() ? -1 : index_arg(count, "count")));
    });
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    const bool right = name[0] == 'r';
    const bool raise = name.find("index") != std::string::npos;
    return bound([s, right, raise](const Args& a) {
      const std::string& sub = str_arg(a, 0, "sub", "find");
      const size_t p = right ? s.rfind(sub) : s.find(sub);
      if (p == std::string::npos) {
        if (raise) throw_render_error("substring not found");
        return Value(int64_t(-1));
      }
      return Value(int64_t(utf8_length(std::string_view(s).substr(0, p))));
    });
  }
  if (name == "count")
    return bound([s](const Args& a) { return Value(count_substring(s, str_arg(a, 0, "sub", "count"))); });
  if (name == "join")
    return bound([s](const Args& a) {
      std::string out;
      bool first = true;
      for (const Value& v : iterate(arg(a, 0, "iterable", "join"))) {
        if (!first) out += s;
        first = false;
        out += v.str();
      }
      return Value(std::move(out));
    });
  if (name == "format") return bound([s](const Args& a) { return Value(python_format(s, a)); });
  if (name == "removeprefix" || name == "removesuffix") {
    const bool prefix = name == "removeprefix";
    return bound([s, prefix](const Args& a) {
      const std::string& t = str_arg(a, 0, "affix", prefix ? "removeprefix" : "removesuffix");
      if (prefix && s.compare(0, t.size(), t) == 0 && s.size() >= t.size()) return Value(s.substr(t.size()));
      if (!prefix && s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0)
        return Value(s.substr(0, s.size() - t.size()));
      return Value(s);
    });
  }
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" || name == "islower" ||
      name == "isupper" || name == "isnumeric" || name == "isdecimal")
    return bound([s, name](const Args&) { return Value(char_class_test(s, name)); });
  if (name == "center" || name == "ljust" || name == "rjust" || name == "zfill")
    return bound([s, name](const Args& a) {
      const int64_t width = index_arg(arg(a, 0, "width", name.c_str()), "width");
      const Value fill = opt(a, 1, "fillchar");
      return Value(pad(s, width, name, fill.is_string() ? fill.as_string() : std::string(" ")));
    });
  return Value::undefined(name);
}

Value dict_method(const Value& self, const std::string& name) {
  if (name == "get")
    return bound([self](const Args& a) {
      const Value& key = arg(a, 0, "key", "get");
      const Value* v = self.as_object().find(key.str());
      if (v != nullptr) return *v;
      const Value* d = a.get(1, "default");
      return d ? *d : Value::none();
    });
  if (name == "items" || name == "keys" || name == "values") {
    const int what = name == "items" ? 0 : name == "keys" ? 1 : 2;
    return bound([self, what](const Args&) {
      Array out;
      for (const auto& [k, v] : self.as_object().items)
        out.push_back(what == 0 ? Value(Array{Value(k), v}) : what == 1 ? Value(k) : v);
      return Value(std::move(out));
    });
  }
  if (name == "update")
    return bound([self](const Args& a) {
      if (const Value* other = a.get(0, "")) {
        if (!other->is_object()) throw_render_error("dict.update() takes a dict");
        for (const auto& [k, v] : other->as_object().items) self.as_object().set(k, v);
      }
      for (const auto& [k, v] : a.keyword) self.as_object().set(k, v);
      return Value::none();
    });
  if (name == "pop")
    return bound([self](const Args& a) {
      const std::string key = arg(a, 0, "key", "pop").str();
      auto& items = self.as_object().items;
      for (auto it = items.begin(); it != items.end(); ++it)
        if (it->first == key) {
          Value v = it->second;
          items.erase(it);
          return v;
        }
      if (const Value* d = a.get(1, "default")) return *d;
      throw_render_error("KeyError: '" + key + "'");
    });
  if (name == "copy") return bound([self](const Args&) { return Value(Object(self.as_object())); });
  return Value::undefined(name);
}

Value list_method(const Value& self, const std::string& name) {
  if (name == "append")
    return bound([self](const Args& a) {
      ContainerArena::count_items(1);
      self.as_array().push_back(arg(a, 0, "object", "append"));
      return Value::none();
    });
  if (name == "extend")
    return bound([self](const Args& a) {
      const Array more = iterate(arg(a, 0, "iterable", "extend"));
      ContainerArena::count_items(more.size());
      self.as_array().insert(self.as_array().end(), more.begin(), more.end());
      return Value::none();
    });
  if (name == "insert")
    return bound([self](const Args& a) {
      Array& l = self.as_array();
      int64_t i = index_arg(arg(a, 0, "index", "insert"), "index");
      if (i < 0) i += int64_t(l.size());
      i = std::clamp<int64_t>(i, 0, int64_t(l.size()));
      ContainerArena::count_items(1);
      l.insert(l.begin() + i, arg(a, 1, "object", "insert"));
      return Value::none();
    });
  if (name == "pop")
    return bound([self](const Args& a) {
      Array& l = self.as_array();
      if (l.empty()) throw_render_error("pop from empty list");
      const Value idx = opt(a, 0, "index");
      int64_t i = idx.is_undefined() ? -1 : index_arg(idx, "index");
      if (i < 0) i += int64_t(l.size());
      if (i < 0 || i >= int64_t(l.size())) throw_render_error("pop index out of range");
      Value v = l[size_t(i)];
      l.erase(l.begin() + i);
      return v;
    });
  if (name == "index" || name == "count") {
    const bool count = name == "count";
    return bound([self, count](const Args& a) {
      const Value& x = arg(a, 0, "value", count ? "count" : "index");
      int64_t n = 0;
      const Array& l = self.as_array();
      for (size_t i = 0; i < l.size(); ++i) {
        if (!equals(l[i], x)) continue;
        if (!count) return Value(int64_t(i));
        ++n;
      }
      if (!count) throw_render_error(x.repr() + " is not in list");
      return Value(n);
    });
  }
  if (name == "reverse")
    return bound([self](const Args&) {
      std::reverse(self.as_array().begin(), self.as_array().end());
      return Value::none();
    });
  if (name == "copy") return bound([self](const Args&) { return Value(Array(self.as_array())); });
  return Value::undefined(name);
}

}  // namespace

Value get_attr(const Value& obj, const std::string& name) {
  switch (obj.type()) {
    case Value::Type::Object: {
      if (const Value* v = obj.as_object().find(name)) return *v;
      if (obj.as_object().is_namespace) return Value::undefined(name);
      return dict_method(obj, name);
    }
    case Value::Type::String: return string_method(obj.as_string(), name);
    case Value::Type::Array: return list_method(obj, name);
    default: return Value::undefined(name);
  }
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_object()) {
    if (const Value* v = obj.as_object().find(key.str())) return *v;
    return key.is_string() ? get_attr(obj, key.as_string()) : Value::undefined(key.str());
  }
  if ((obj.is_array() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.is_bool() ? key.as_bool() : key.as_int();
    if (obj.is_array()) {
      const int64_t n = int64_t(obj.as_array().size());
      if (i < 0) i += n;
      return i >= 0 && i < n ? obj.as_array()[size_t(i)] : Value::undefined(key.str());
    }
    const std::vector<std::string> chars = utf8_chars(obj.as_string());
    const int64_t n = int64_t(chars.size());
    if (i < 0) i += n;
    return i >= 0 && i < n ? Value(chars[size_t(i)]) : Value::undefined(key.str());
  }
  if (key.is_string()) return get_attr(obj, key.as_string());
  return Value::undefined(key.str());
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (!obj.is_array() && !obj.is_string()) {
    if (obj.is_undefined()) return obj;
    throw_render_error(std::string("'") + obj.type_name() + "' object is not subscriptable");
  }
  std::vector<std::string> chars;
  if (obj.is_string()) chars = utf8_chars(obj.as_string());
  const int64_t n = obj.is_array() ? int64_t(obj.as_array().size()) : int64_t(chars.size());
  int64_t b, e, s;
  slice_indices(n, start, stop, step, &b, &e, &s);
  if (obj.is_array()) {
    Array out;
    for (int64_t i = b; s > 0 ? i < e : i > e; i += s) out.push_back(obj.as_array()[size_t(i)]);
    return Value(std::move(out));
  }
  std::string out;
  for (int64_t i = b; s > 0 ? i < e : i > e; i += s) out += chars[size_t(i)];
  return Value(std::move(out));
}

Array iterate(const Value& v) {
  switch (v.type()) {
    case Value::Type::Undefined: return {};
    case Value::Type::Array: return v.as_array();
    case Value::Type::Object: {
      Array keys;
      for (const auto& kv : v.as_object().items) keys.emplace_back(kv.first);
      return keys;
    }
    case Value::Type::String: {
      Array chars;
      for (std::string& c : utf8_chars(v.as_string())) chars.emplace_back(std::move(c));
      return chars;
    }
    default: throw_render_error(std::string("'") + v.type_name() + "' object is not iterable");
  }
}

bool contains(const Value& container, const Value& item) {
  switch (container.type()) {
    case Value::Type::String:
      if (!item.is_string())
        throw_render_error(std::string("'in <string>' requires string as left operand, not ") + item.type_name());
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Type::Array:
      return std::any_of(container.as_array().begin(), container.as_array().end(),
                         [&](const Value& x) { return equals(x, item); });
    case Value::Type::Object: return container.as_object().find(item.str()) != nullptr;
    case Value::Type::Undefined: return false;
    default: throw_render_error(std::string("argument of type '") + container.type_name() + "' is not iterable");
  }
}

}  // namespace inflight::server::jinja

// The globals a render starts with: range, namespace, dict, raise_exception, strftime_now, joiner, cycler.
#include <ctime>
#include <memory>

#include "server/jinja/builtins.h"

namespace inflight::server::jinja {

namespace {

int64_t int_arg(const Value& v, const char* fn) {
  if (v.is_int()) return v.as_int();
  if (v.is_bool()) return v.as_bool();
  throw_render_error(std::string(fn) + "() needs integers, got " + v.type_name());
}

Value range(const Args& a) {
  const auto& p = a.positional;
  if (p.empty() || p.size() > 3) throw_render_error("range() takes 1 to 3 arguments");
  int64_t start = 0, stop, step = 1;
  if (p.size() == 1) {
    stop = int_arg(p[0], "range");
  } else {
    start = int_arg(p[0], "range");
    stop = int_arg(p[1], "range");
    if (p.size() == 3) step = int_arg(p[2], "range");
  }
  if (step == 0) throw_render_error("range() step must not be zero");
  constexpr int64_t kMaxItems = 1 << 20;  // a template has no use for more; guards memory
  Array out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
    if (int64_t(out.size()) >= kMaxItems) throw_render_error("range() too large");
    out.emplace_back(i);
    if (__builtin_add_overflow(i, step, &i)) break;  // past int64's end: past `stop` too
  }
  return Value(std::move(out));
}

// namespace(dict, key=value, ...) and dict(dict, key=value, ...).
Value make_object(const Args& a, bool is_namespace) {
  Object o;
  o.is_namespace = is_namespace;
  for (const Value& p : a.positional) {
    if (p.is_object()) {
      for (const auto& [k, v] : p.as_object().items) o.set(k, v);
    } else if (p.is_array()) {
      for (const Value& pair : p.as_array()) {
        if (!pair.is_array() || pair.as_array().size() != 2)
          throw_render_error("namespace()/dict() takes a dict or a list of [key, value] pairs");
        o.set(pair.as_array()[0].str(), pair.as_array()[1]);
      }
    } else {
      throw_render_error("namespace()/dict() takes a dict or a list of [key, value] pairs");
    }
  }
  for (const auto& [k, v] : a.keyword) o.set(k, v);
  return Value(std::move(o));
}

}  // namespace

Object make_globals() {
  Object g;
  g.set("range", Value::function(range));
  g.set("namespace", Value::function([](const Args& a) { return make_object(a, true); }));
  g.set("dict", Value::function([](const Args& a) { return make_object(a, false); }));
  g.set("raise_exception", Value::function([](const Args& a) -> Value {
    const Value* m = a.get(0, "message");
    throw Error(Error::Kind::Raised, m ? m->str() : "raise_exception() called");
  }));
  // strftime_now(format): the local time now, as transformers' chat templates use it for dates.
  g.set("strftime_now", Value::function([](const Args& a) {
    const Value* f = a.get(0, "format");
    if (f == nullptr || !f->is_string()) throw_render_error("strftime_now() needs a format string");
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[256];
    const size_t n = std::strftime(buf, sizeof buf, f->as_string().c_str(), &tm);
    return Value(std::string(buf, n));
  }));
  g.set("joiner", Value::function([](const Args& a) {
    const std::string sep = a.get(0, "sep") ? a.get(0, "sep")->str() : ", ";
    auto used = std::make_shared<bool>(false);
    return Value::function([sep, used](const Args&) {
      if (!*used) {
        *used = true;
        return Value("");
      }
      return Value(sep);
    });
  }));
  g.set("cycler", Value::function([](const Args& a) {
    if (a.positional.empty()) throw_render_error("cycler() needs at least one item");
    auto state = std::make_shared<std::pair<Array, size_t>>(a.positional, 0);
    Object c;
    c.set("next", Value::function([state](const Args&) {
      Value v = state->first[state->second];
      state->second = (state->second + 1) % state->first.size();
      return v;
    }));
    c.set("reset", Value::function([state](const Args&) {
      state->second = 0;
      return Value::none();
    }));
    return Value(std::move(c));
  }));
  return g;
}

}  // namespace inflight::server::jinja

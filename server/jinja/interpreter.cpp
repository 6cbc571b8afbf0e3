#include "server/jinja/interpreter.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>

#include "server/jinja/builtins.h"
#include "server/jinja/string_ops.h"

namespace inflight::server::jinja {

namespace {

struct Scope;
using ScopePtr = std::shared_ptr<Scope>;

struct Scope {
  ScopePtr parent;
  Object vars;

  explicit Scope(ScopePtr p) : parent(std::move(p)) {}
  const Value* lookup(const std::string& name) const {
    for (const Scope* s = this; s != nullptr; s = s->parent.get())
      if (const Value* v = s->vars.find(name)) return v;
    return nullptr;
  }
};

// The deepest for loops and macro calls may nest (a guard against runaway recursion).
constexpr int kMaxDepth = 200;
// Budgets of one render, far above any chat template's needs: a template that loops or writes without end
// fails instead of holding a server thread.
constexpr int64_t kMaxIterations = 1'000'000;  // for-loop bodies run
constexpr size_t kMaxOutputBytes = size_t(64) << 20;

[[noreturn]] void fail_at(int line, const std::string& what) {
  throw Error(Error::Kind::Render, "template error, line " + std::to_string(line) + ": " + what);
}

std::string binary_type_error(const char* op, const Value& a, const Value& b) {
  return std::string("unsupported operand type(s) for ") + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'";
}

bool numeric(const Value& v) { return v.is_number() || v.is_bool(); }
bool integral(const Value& v) { return v.is_int() || v.is_bool(); }
int64_t to_int(const Value& v) { return v.is_bool() ? int64_t(v.as_bool()) : v.as_int(); }

Value arithmetic(const std::string& op, const Value& a, const Value& b, int line) {
  if (op == "~") return Value(a.str() + b.str());
  if (op == "+") {
    if (a.is_string() && b.is_string()) return Value(a.as_string() + b.as_string());
    if (a.is_array() && b.is_array()) {
      Array out = a.as_array();
      out.insert(out.end(), b.as_array().begin(), b.as_array().end());
      return Value(std::move(out));
    }
  }
  if (op == "*") {
    if ((a.is_string() || a.is_array()) && integral(b)) return arithmetic("*", b, a, line);
    constexpr int64_t kMaxRepeated = int64_t(1) << 26;  // bytes or items; a template has no use for more
    if (integral(a) && (b.is_string() || b.is_array()) && to_int(a) > 0 &&
        to_int(a) > kMaxRepeated / int64_t(std::max<size_t>(1, b.is_string() ? b.as_string().size() : b.as_array().size())))
      fail_at(line, "a repetition too large (over 64 Mi bytes or items)");
    if (integral(a) && b.is_string()) {
      std::string out;
      for (int64_t i = 0; i < to_int(a); ++i) out += b.as_string();
      return Value(std::move(out));
    }
    if (integral(a) && b.is_array()) {
      Array out;
      for (int64_t i = 0; i < to_int(a); ++i) out.insert(out.end(), b.as_array().begin(), b.as_array().end());
      return Value(std::move(out));
    }
  }
  if (op == "%" && a.is_string()) return Value(percent_format(a.as_string(), b));
  if (!numeric(a) || !numeric(b)) {
    if (a.is_undefined() || b.is_undefined())
      fail_at(line, "'" + (a.is_undefined() ? a : b).undefined_name() + "' is undefined");
    fail_at(line, binary_type_error(op.c_str(), a, b));
  }
  const bool ints = integral(a) && integral(b);
  if (op == "/") {
    if (b.as_number() == 0.0) fail_at(line, "division by zero");
    return Value(a.as_number() / b.as_number());
  }
  if (ints) {
    // NOTE: 64-bit integers (Python's are unbounded): overflow is an error rather than a wrapped value.
    const int64_t x = to_int(a), y = to_int(b);
    int64_t r = 0;
    auto checked = [&](bool overflow) {
      if (overflow) fail_at(line, "integer overflow in " + std::to_string(x) + " " + op + " " + std::to_string(y));
      return Value(r);
    };
    if (op == "+") return checked(__builtin_add_overflow(x, y, &r));
    if (op == "-") return checked(__builtin_sub_overflow(x, y, &r));
    if (op == "*") return checked(__builtin_mul_overflow(x, y, &r));
    if (op == "//" || op == "%") {
      if (y == 0) fail_at(line, "integer division or modulo by zero");
      if (y == -1) return op == "//" ? checked(__builtin_sub_overflow(int64_t(0), x, &r)) : Value(int64_t(0));
      int64_t q = x / y;
      r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) --q, r += y;  // Python floors
      return Value(op == "//" ? q : r);
    }
    if (op == "**") {
      if (y < 0) return Value(std::pow(double(x), double(y)));
      // By squaring: O(log y) steps, so 1 ** 10**18 ends (a loop of y multiplications would not).
      r = 1;
      for (int64_t base = x, e = y; e > 0; e >>= 1) {
        int64_t next = 0;
        if ((e & 1) && __builtin_mul_overflow(r, base, &r)) return checked(true);
        if (e > 1 && __builtin_mul_overflow(base, base, &next)) return checked(true);
        base = next;
      }
      return Value(r);
    }
  }
  const double x = a.as_number(), y = b.as_number();
  if (op == "+") return Value(x + y);
  if (op == "-") return Value(x - y);
  if (op == "*") return Value(x * y);
  if (op == "//" || op == "%") {
    if (y == 0.0) fail_at(line, "float division or modulo by zero");
    const double q = std::floor(x / y);
    return Value(op == "//" ? q : x - q * y);
  }
  if (op == "**") return Value(std::pow(x, y));
  fail_at(line, "unknown operator " + op);
}

class Interpreter {
 public:
  enum class Flow { Normal, Break, Continue };

  Flow exec(const Body& body, const ScopePtr& scope, std::string& out) {
    for (const StmtPtr& s : body) {
      const Flow f = exec(*s, scope, out);
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

  Value eval(const Expr& e, const ScopePtr& scope) {
    switch (e.kind) {
      case Expr::Kind::Literal: return e.value;
      case Expr::Kind::Name: {
        const Value* v = scope->lookup(e.name);
        return v ? *v : Value::undefined(e.name);
      }
      case Expr::Kind::List: {
        Array a;
        a.reserve(e.items.size());
        for (const ExprPtr& i : e.items) a.push_back(eval(*i, scope));
        return Value(std::move(a));
      }
      case Expr::Kind::Dict: {
        Object o;
        for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
          const Value k = eval(*e.items[i], scope);
          o.set(k.str(), eval(*e.items[i + 1], scope));
        }
        return Value(std::move(o));
      }
      case Expr::Kind::Attr: return get_attr(eval(*e.items[0], scope), e.name);
      case Expr::Kind::Subscript: return get_item(eval(*e.items[0], scope), eval(*e.items[1], scope));
      case Expr::Kind::Slice: {
        auto part = [&](size_t i) { return e.items[i] ? eval(*e.items[i], scope) : Value(); };
        return wrap(e.line, [&] { return get_slice(eval(*e.items[0], scope), part(1), part(2), part(3)); });
      }
      case Expr::Kind::Call: return call(e, scope, nullptr);
      case Expr::Kind::Filter: return eval_filter(e, scope, nullptr);
      case Expr::Kind::Test: {
        const Value operand = eval(*e.items[0], scope);
        const Args args = eval_args(e, 1, scope);
        const bool r = wrap(e.line, [&] { return call_test(e.name, operand, args); });
        return Value(e.negated ? !r : r);
      }
      case Expr::Kind::Not: return Value(!eval(*e.items[0], scope).truthy());
      case Expr::Kind::Negate:
      case Expr::Kind::Plus: {
        const Value v = eval(*e.items[0], scope);
        if (!numeric(v)) fail_at(e.line, std::string("bad operand type for unary ") + (e.kind == Expr::Kind::Negate ? "-" : "+") +
                                             ": '" + v.type_name() + "'");
        if (e.kind == Expr::Kind::Plus) return v.is_bool() ? Value(to_int(v)) : v;
        if (integral(v) && to_int(v) == INT64_MIN) fail_at(e.line, "integer overflow in -" + v.str());
        return integral(v) ? Value(-to_int(v)) : Value(-v.as_float());
      }
      case Expr::Kind::Binary: {
        if (e.name == "and" || e.name == "or") {
          Value a = eval(*e.items[0], scope);
          if (a.truthy() == (e.name == "or")) return a;
          return eval(*e.items[1], scope);
        }
        return arithmetic(e.name, eval(*e.items[0], scope), eval(*e.items[1], scope), e.line);
      }
      case Expr::Kind::Compare: {
        Value left = eval(*e.items[0], scope);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.items[i + 1], scope);
          const std::string& op = e.ops[i];
          bool r;
          if (op == "==") r = equals(left, right);
          else if (op == "!=") r = !equals(left, right);
          else if (op == "in" || op == "not in") r = wrap(e.line, [&] { return contains(right, left); }) == (op == "in");
          else {
            const int c = wrap(e.line, [&] { return compare(left, right); });
            r = op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0;
          }
          if (!r) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case Expr::Kind::Ternary:
        if (eval(*e.items[1], scope).truthy()) return eval(*e.items[0], scope);
        return e.items[2] ? eval(*e.items[2], scope) : Value::undefined();
    }
    fail_at(e.line, "unknown expression");
  }

 private:
  int depth_ = 0;
  int64_t iterations_ = 0;

  static void check_output(const Stmt& s, const std::string& out) {
    if (out.size() > kMaxOutputBytes) fail_at(s.line, "the template wrote more than 64 MiB");
  }

  // Adds the line to errors from the builtins (which do not know it).
  template <class F>
  auto wrap(int line, F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (const Error& err) {
      if (err.kind() != Error::Kind::Render || std::string_view(err.what()).rfind("template error, line", 0) == 0) throw;
      fail_at(line, err.what());
    }
  }

  Args eval_args(const Expr& e, size_t first, const ScopePtr& scope) {
    Args args;
    for (size_t i = first; i < e.items.size(); ++i) args.positional.push_back(eval(*e.items[i], scope));
    for (const auto& kv : e.kwargs) {
      const auto& k = kv.first;  // not a structured binding: clang 14 cannot capture one in a lambda
      const auto& v = kv.second;
      if (k == "*") {
        for (Value& x : wrap(e.line, [&] { return iterate(eval(*v, scope)); })) args.positional.push_back(std::move(x));
      } else if (k == "**") {
        const Value d = eval(*v, scope);
        if (!d.is_object()) fail_at(e.line, std::string("argument after ** must be a mapping, not ") + d.type_name());
        for (const auto& [dk, dv] : d.as_object().items) args.keyword.emplace_back(dk, dv);
      } else {
        args.keyword.emplace_back(k, eval(*v, scope));
      }
    }
    return args;
  }

  // The callee's name for error messages.
  static std::string callee_name(const Expr& callee) {
    if (callee.kind == Expr::Kind::Name || callee.kind == Expr::Kind::Attr) return callee.name;
    return "object";
  }

  Value call(const Expr& e, const ScopePtr& scope, const Value* caller) {
    const Value fn = eval(*e.items[0], scope);
    Args args = eval_args(e, 1, scope);
    if (caller != nullptr) args.keyword.emplace_back("caller", *caller);
    if (!fn.is_function()) {
      if (fn.is_undefined())
        fail_at(e.line, "'" + callee_name(*e.items[0]) + "' is undefined and cannot be called");
      fail_at(e.line, std::string("'") + fn.type_name() + "' object is not callable");
    }
    return wrap(e.line, [&] { return fn.as_function()(args); });
  }

  // A filter expression; a filter block's chain gets its operand (the block's text) from `operand`.
  Value eval_filter(const Expr& e, const ScopePtr& scope, const Value* operand) {
    const Expr* inner = e.items[0].get();
    Value v = inner == nullptr ? *operand
              : inner->kind == Expr::Kind::Filter ? eval_filter(*inner, scope, operand)
                                                   : eval(*inner, scope);
    const Args args = eval_args(e, 1, scope);
    return wrap(e.line, [&] { return call_filter(e.name, v, args); });
  }

  void assign(const Stmt& s, const std::vector<std::string>& targets, const Value& v, Scope& scope) {
    if (targets.size() == 1) {
      scope.vars.set(targets[0], v);
      return;
    }
    const Array items = wrap(s.line, [&] { return iterate(v); });
    if (items.size() != targets.size())
      fail_at(s.line, "cannot unpack " + std::to_string(items.size()) + " values into " + std::to_string(targets.size()) +
                          " names");
    for (size_t i = 0; i < targets.size(); ++i) scope.vars.set(targets[i], items[i]);
  }

  Flow exec(const Stmt& s, const ScopePtr& scope, std::string& out) {
    switch (s.kind) {
      case Stmt::Kind::Text:
        out += s.text;
        check_output(s, out);
        return Flow::Normal;
      case Stmt::Kind::Output:
        out += eval(*s.expr, scope).str();
        check_output(s, out);
        return Flow::Normal;
      case Stmt::Kind::If:
        for (size_t i = 0; i < s.conditions.size(); ++i)
          if (eval(*s.conditions[i], scope).truthy()) return exec(s.bodies[i], scope, out);
        return exec(s.else_body, scope, out);
      case Stmt::Kind::For: exec_for(s, scope, out); return Flow::Normal;
      case Stmt::Kind::Set: {
        const Value v = eval(*s.expr, scope);
        if (!s.attr_object.empty()) {
          const Value* ns = scope->lookup(s.attr_object);
          if (ns == nullptr || !ns->is_object() || !ns->as_object().is_namespace)
            fail_at(s.line, "cannot assign attribute '" + s.text + "' on '" + s.attr_object + "': not a namespace");
          ns->as_object().set(s.text, v);
        } else {
          assign(s, s.targets, v, *scope);
        }
        return Flow::Normal;
      }
      case Stmt::Kind::SetBlock: {
        std::string text;
        exec(s.body, scope, text);
        Value v(std::move(text));
        if (s.expr) v = eval_filter(*s.expr, scope, &v);
        scope->vars.set(s.targets[0], v);
        return Flow::Normal;
      }
      case Stmt::Kind::Macro: scope->vars.set(s.text, make_macro(s, s.params, s.body, scope, s.text)); return Flow::Normal;
      case Stmt::Kind::CallBlock: {
        const Value caller = make_macro(s, s.params, s.body, scope, "caller");
        out += call(*s.expr, scope, &caller).str();
        return Flow::Normal;
      }
      case Stmt::Kind::FilterBlock: {
        std::string text;
        exec(s.body, scope, text);
        const Value v(std::move(text));
        out += eval_filter(*s.expr, scope, &v).str();
        return Flow::Normal;
      }
      case Stmt::Kind::Break: return Flow::Break;
      case Stmt::Kind::Continue: return Flow::Continue;
    }
    return Flow::Normal;
  }

  void exec_for(const Stmt& s, const ScopePtr& scope, std::string& out) {
    const Value iterable = eval(*s.expr, scope);
    if (iterable.is_none()) fail_at(s.line, "'NoneType' object is not iterable");
    Array items = wrap(s.line, [&] { return iterate(iterable); });
    if (s.filter) {
      Array kept;
      for (const Value& item : items) {
        auto probe = std::make_shared<Scope>(scope);
        assign(s, s.targets, item, *probe);
        if (eval(*s.filter, probe).truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      auto inner = std::make_shared<Scope>(scope);
      exec(s.else_body, inner, out);
      return;
    }
    if (++depth_ > kMaxDepth) fail_at(s.line, "loops and macro calls nest too deeply");
    const int64_t n = int64_t(items.size());
    auto last_changed = std::make_shared<Array>();
    for (int64_t i = 0; i < n; ++i) {
      if (++iterations_ > kMaxIterations)
        fail_at(s.line, "the template ran more than " + std::to_string(kMaxIterations) + " loop iterations");
      auto inner = std::make_shared<Scope>(scope);
      assign(s, s.targets, items[size_t(i)], *inner);
      Object loop;
      loop.set("index", Value(i + 1));
      loop.set("index0", Value(i));
      loop.set("revindex", Value(n - i));
      loop.set("revindex0", Value(n - i - 1));
      loop.set("first", Value(i == 0));
      loop.set("last", Value(i == n - 1));
      loop.set("length", Value(n));
      loop.set("depth", Value(1));
      loop.set("depth0", Value(0));
      loop.set("previtem", i > 0 ? items[size_t(i - 1)] : Value::undefined("previtem"));
      loop.set("nextitem", i + 1 < n ? items[size_t(i + 1)] : Value::undefined("nextitem"));
      loop.set("cycle", Value::function([i](const Args& a) {
        if (a.positional.empty()) throw_render_error("loop.cycle needs at least one value");
        return a.positional[size_t(i) % a.positional.size()];
      }));
      loop.set("changed", Value::function([last_changed](const Args& a) {
        Array now = a.positional;
        const bool changed = last_changed->size() != now.size() || !equals(Value(*last_changed), Value(now));
        *last_changed = std::move(now);
        return Value(changed);
      }));
      inner->vars.set("loop", Value(std::move(loop)));
      if (exec(s.body, inner, out) == Flow::Break) break;
    }
    --depth_;
  }

  // A macro (or a call block's caller) as a callable: binds the arguments to its parameters in a new
  // scope over the one it was defined in, renders its body and returns the text.
  Value make_macro(const Stmt& s, const std::vector<MacroParam>& params, const Body& body, const ScopePtr& defined_in,
                   const std::string& name) {
    // NOTE: a weak reference: the macro is usually stored in the very scope it was defined in, and a strong one
    // would make that scope own itself (a leak LeakSanitizer reports).
    return Value::function([this, &s, &params, &body, weak = std::weak_ptr<Scope>(defined_in), name](const Args& args) {
      ScopePtr defined_in = weak.lock();
      if (defined_in == nullptr) fail_at(s.line, "macro '" + name + "' called after the scope that defined it ended");
      auto scope = std::make_shared<Scope>(defined_in);
      Array varargs;
      for (size_t i = 0; i < args.positional.size(); ++i) {
        if (i < params.size()) scope->vars.set(params[i].name, args.positional[i]);
        else varargs.push_back(args.positional[i]);
      }
      Object kwargs;
      for (const auto& [k, v] : args.keyword) {
        bool is_param = k == "caller";
        for (const MacroParam& p : params) is_param |= p.name == k;
        if (is_param) scope->vars.set(k, v);
        else kwargs.set(k, v);
      }
      for (const MacroParam& p : params) {
        if (scope->vars.find(p.name) != nullptr) continue;
        scope->vars.set(p.name, p.default_value ? eval(*p.default_value, scope) : Value::undefined(p.name));
      }
      scope->vars.set("varargs", Value(std::move(varargs)));
      scope->vars.set("kwargs", Value(std::move(kwargs)));
      if (++depth_ > kMaxDepth) fail_at(s.line, "macro '" + name + "' nests too deeply");
      std::string text;
      exec(body, scope, text);
      --depth_;
      return Value(std::move(text));
    });
  }
};

}  // namespace

std::string render(const Body& program, const Value& context) {
  // Declared first, so it ends last: what the scopes leave alive (cycles) is emptied after they are gone.
  ContainerArena arena;
  auto globals = std::make_shared<Scope>(nullptr);
  globals->vars = make_globals();
  auto top = std::make_shared<Scope>(globals);
  // The template works on its own copy: it cannot change the caller's values or tie them into a cycle.
  if (context.is_object())
    for (const auto& [k, v] : context.as_object().items) top->vars.set(k, deep_copy(v));
  Interpreter interp;
  std::string out;
  interp.exec(program, top, out);
  return out;
}

}  // namespace inflight::server::jinja

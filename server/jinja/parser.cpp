#include "server/jinja/parser.h"

#include <algorithm>
#include <initializer_list>
#include <string_view>

namespace inflight::server::jinja {

namespace {

std::string describe(const Token& t) {
  switch (t.kind) {
    case TokenKind::Text: return "template text";
    case TokenKind::VarBegin: return "'{{'";
    case TokenKind::VarEnd: return "'}}'";
    case TokenKind::BlockBegin: return "'{%'";
    case TokenKind::BlockEnd: return "'%}'";
    case TokenKind::End: return "the end of the template";
    case TokenKind::String: return "string '" + t.text + "'";
    default: return "'" + t.text + "'";
  }
}

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : t_(tokens) {}

  Body parse_template() {
    std::string end;
    Body body = parse_body({}, &end);
    return body;
  }

 private:
  const std::vector<Token>& t_;
  size_t i_ = 0;
  int depth_ = 0;  // nesting of blocks and expressions being parsed

  // Bounds the recursion (and the interpreter's, which follows the tree): a template nested deeper than
  // any real one is refused instead of overflowing the stack.
  struct DepthGuard {
    Parser* p;
    explicit DepthGuard(Parser* parser) : p(parser) {
      if (++p->depth_ > 128) p->fail("blocks or expressions nest too deeply (more than 128 levels)");
    }
    ~DepthGuard() { --p->depth_; }
  };

  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t n = 1) const { return t_[std::min(i_ + n, t_.size() - 1)]; }
  void advance() {
    if (i_ + 1 < t_.size()) ++i_;
  }

  [[noreturn]] void fail(const std::string& what, int line = 0) const {
    throw Error(Error::Kind::Syntax,
                "template syntax error, line " + std::to_string(line ? line : cur().line) + ": " + what);
  }

  bool is_op(std::string_view op) const { return cur().kind == TokenKind::Operator && cur().text == op; }
  bool is_name(std::string_view name) const { return cur().kind == TokenKind::Name && cur().text == name; }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!is_name(name)) return false;
    advance();
    return true;
  }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) fail("expected '" + std::string(op) + "', got " + describe(cur()));
  }
  void expect(TokenKind kind, const char* what) {
    if (cur().kind != kind) fail(std::string("expected ") + what + ", got " + describe(cur()));
    advance();
  }
  std::string expect_identifier() {
    if (cur().kind != TokenKind::Name) fail("expected a name, got " + describe(cur()));
    std::string name = cur().text;
    advance();
    return name;
  }

  // Statements until one of `ends` (a block tag whose first name is in it); `*end` gets that name and the
  // parser stands on it. At the top level (no ends) the end of the template closes the body.
  Body parse_body(std::initializer_list<std::string_view> ends, std::string* end, int opened_line = 0) {
    Body body;
    while (true) {
      const Token& t = cur();
      switch (t.kind) {
        case TokenKind::End:
          if (ends.size() == 0) return body;
          fail("unexpected end of template, expected '" + std::string(*(ends.end() - 1)) + "' (the block opened on line " +
                   std::to_string(opened_line) + ")");
        case TokenKind::Text: {
          auto s = std::make_unique<Stmt>(Stmt::Kind::Text, t.line);
          s->text = t.text;
          body.push_back(std::move(s));
          advance();
          break;
        }
        case TokenKind::VarBegin: {
          advance();
          auto s = std::make_unique<Stmt>(Stmt::Kind::Output, t.line);
          s->expr = parse_tuple(true);
          expect(TokenKind::VarEnd, "'}}'");
          body.push_back(std::move(s));
          break;
        }
        case TokenKind::BlockBegin: {
          const Token& name = peek();
          if (name.kind == TokenKind::Name &&
              std::find(ends.begin(), ends.end(), std::string_view(name.text)) != ends.end()) {
            advance();
            *end = name.text;
            return body;
          }
          advance();
          if (StmtPtr s = parse_statement()) body.push_back(std::move(s));
          break;
        }
        default: fail("unexpected " + describe(t));
      }
    }
  }

  // Closes a block: stands on the end name; takes it and the '%}'.
  void close_tag() {
    advance();
    expect(TokenKind::BlockEnd, "'%}'");
  }

  StmtPtr parse_statement() {
    const DepthGuard guard(this);
    const int line = cur().line;
    const std::string tag = expect_identifier();
    if (tag == "if") return parse_if(line);
    if (tag == "for") return parse_for(line);
    if (tag == "set") return parse_set(line);
    if (tag == "macro") return parse_macro(line);
    if (tag == "call") return parse_call_block(line);
    if (tag == "filter") return parse_filter_block(line);
    if (tag == "raw") {
      expect(TokenKind::BlockEnd, "'%}'");
      auto s = std::make_unique<Stmt>(Stmt::Kind::Text, line);
      if (cur().kind == TokenKind::Text) {
        s->text = cur().text;
        advance();
      }
      expect(TokenKind::BlockBegin, "'{% endraw %}'");
      if (!skip_name("endraw")) fail("expected 'endraw'");
      expect(TokenKind::BlockEnd, "'%}'");
      return s;
    }
    if (tag == "break" || tag == "continue") {
      expect(TokenKind::BlockEnd, "'%}'");
      return std::make_unique<Stmt>(tag == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue, line);
    }
    // Hugging Face's {% generation %} marks assistant text for training masks; it renders nothing.
    if (tag == "generation" || tag == "endgeneration") {
      expect(TokenKind::BlockEnd, "'%}'");
      return nullptr;
    }
    fail("unknown tag '" + tag + "'", line);
  }

  StmtPtr parse_if(int line) {
    auto s = std::make_unique<Stmt>(Stmt::Kind::If, line);
    while (true) {
      s->conditions.push_back(parse_tuple(true));
      expect(TokenKind::BlockEnd, "'%}'");
      std::string end;
      s->bodies.push_back(parse_body({"elif", "else", "endif"}, &end, line));
      if (end == "elif") {
        advance();
        continue;
      }
      if (end == "else") {
        close_tag();
        s->else_body = parse_body({"endif"}, &end, line);
      }
      close_tag();
      return s;
    }
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> targets;
    const bool paren = skip_op("(");
    do {
      targets.push_back(expect_identifier());
    } while (skip_op(","));
    if (paren) expect_op(")");
    return targets;
  }

  StmtPtr parse_for(int line) {
    auto s = std::make_unique<Stmt>(Stmt::Kind::For, line);
    s->targets = parse_targets();
    if (!skip_name("in")) fail("expected 'in' in a for loop, got " + describe(cur()));
    s->expr = parse_tuple(false);
    if (skip_name("if")) s->filter = parse_expression(true);
    if (skip_name("recursive")) fail("recursive for loops are not supported", line);
    expect(TokenKind::BlockEnd, "'%}'");
    std::string end;
    s->body = parse_body({"else", "endfor"}, &end, line);
    if (end == "else") {
      close_tag();
      s->else_body = parse_body({"endfor"}, &end, line);
    }
    close_tag();
    return s;
  }

  StmtPtr parse_set(int line) {
    std::string first = expect_identifier();
    if (skip_op(".")) {
      auto s = std::make_unique<Stmt>(Stmt::Kind::Set, line);
      s->attr_object = first;
      s->text = expect_identifier();
      expect_op("=");
      s->expr = parse_tuple(true);
      expect(TokenKind::BlockEnd, "'%}'");
      return s;
    }
    std::vector<std::string> targets = {first};
    while (skip_op(",")) targets.push_back(expect_identifier());
    if (skip_op("=")) {
      auto s = std::make_unique<Stmt>(Stmt::Kind::Set, line);
      s->targets = std::move(targets);
      s->expr = parse_tuple(true);
      expect(TokenKind::BlockEnd, "'%}'");
      return s;
    }
    if (targets.size() != 1) fail("a block set takes one name", line);
    auto s = std::make_unique<Stmt>(Stmt::Kind::SetBlock, line);
    s->targets = std::move(targets);
    if (is_op("|")) s->expr = parse_filter_chain(nullptr);
    expect(TokenKind::BlockEnd, "'%}'");
    std::string end;
    s->body = parse_body({"endset"}, &end, line);
    close_tag();
    return s;
  }

  std::vector<MacroParam> parse_params() {
    std::vector<MacroParam> params;
    expect_op("(");
    while (!skip_op(")")) {
      if (!params.empty()) expect_op(",");
      if (skip_op(")")) break;
      MacroParam p;
      p.name = expect_identifier();
      if (skip_op("=")) p.default_value = parse_expression(true);
      params.push_back(std::move(p));
    }
    return params;
  }

  StmtPtr parse_macro(int line) {
    auto s = std::make_unique<Stmt>(Stmt::Kind::Macro, line);
    s->text = expect_identifier();
    s->params = parse_params();
    expect(TokenKind::BlockEnd, "'%}'");
    std::string end;
    s->body = parse_body({"endmacro"}, &end, line);
    close_tag();
    return s;
  }

  StmtPtr parse_call_block(int line) {
    auto s = std::make_unique<Stmt>(Stmt::Kind::CallBlock, line);
    if (is_op("(")) s->params = parse_params();
    s->expr = parse_expression(true);
    if (s->expr->kind != Expr::Kind::Call) fail("a call block needs a call, e.g. {% call my_macro() %}", line);
    expect(TokenKind::BlockEnd, "'%}'");
    std::string end;
    s->body = parse_body({"endcall"}, &end, line);
    close_tag();
    return s;
  }

  StmtPtr parse_filter_block(int line) {
    auto s = std::make_unique<Stmt>(Stmt::Kind::FilterBlock, line);
    s->expr = parse_filter_chain(nullptr, /*leading_pipe=*/false);
    expect(TokenKind::BlockEnd, "'%}'");
    std::string end;
    s->body = parse_body({"endfilter"}, &end, line);
    close_tag();
    return s;
  }

  // ---- expressions ----

  // a, b, c: a tuple (a list) when there is a comma; `condexpr` allows `x if y else z`.
  ExprPtr parse_tuple(bool condexpr) {
    const int line = cur().line;
    ExprPtr first = parse_expression(condexpr);
    if (!is_op(",")) return first;
    auto list = std::make_unique<Expr>(Expr::Kind::List, line);
    list->items.push_back(std::move(first));
    while (skip_op(",")) {
      if (cur().kind == TokenKind::VarEnd || cur().kind == TokenKind::BlockEnd || is_op(")") || is_op("=")) break;
      list->items.push_back(parse_expression(condexpr));
    }
    return list;
  }

  ExprPtr parse_expression(bool condexpr) {
    const DepthGuard guard(this);
    ExprPtr e = parse_or();
    if (!condexpr) return e;
    while (is_name("if")) {
      const int line = cur().line;
      advance();
      auto t = std::make_unique<Expr>(Expr::Kind::Ternary, line);
      t->items.push_back(std::move(e));
      t->items.push_back(parse_or());
      t->items.push_back(skip_name("else") ? parse_expression(true) : nullptr);
      e = std::move(t);
    }
    return e;
  }

  ExprPtr binary(std::string op, ExprPtr a, ExprPtr b, int line) {
    auto e = std::make_unique<Expr>(Expr::Kind::Binary, line);
    e->name = std::move(op);
    e->items.push_back(std::move(a));
    e->items.push_back(std::move(b));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      const int line = cur().line;
      advance();
      e = binary("or", std::move(e), parse_and(), line);
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      const int line = cur().line;
      advance();
      e = binary("and", std::move(e), parse_not(), line);
    }
    return e;
  }

  ExprPtr parse_not() {
    const DepthGuard guard(this);
    if (is_name("not")) {
      const int line = cur().line;
      advance();
      auto e = std::make_unique<Expr>(Expr::Kind::Not, line);
      e->items.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  // a < b < c: one Compare of the operands [a, b, c] and the operators ["<", "<"], b evaluated once.
  ExprPtr parse_compare() {
    const int line = cur().line;
    ExprPtr e = parse_math1();
    std::unique_ptr<Expr> cmp;
    while (true) {
      std::string op;
      if (cur().kind == TokenKind::Operator &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == ">" || cur().text == "<=" ||
           cur().text == ">=")) {
        op = cur().text;
        advance();
      } else if (is_name("in")) {
        op = "in";
        advance();
      } else if (is_name("not") && peek().kind == TokenKind::Name && peek().text == "in") {
        op = "not in";
        advance();
        advance();
      } else {
        break;
      }
      if (!cmp) {
        cmp = std::make_unique<Expr>(Expr::Kind::Compare, line);
        cmp->items.push_back(std::move(e));
      }
      cmp->ops.push_back(std::move(op));
      cmp->items.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(e);
  }

  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const std::string op = cur().text;
      const int line = cur().line;
      advance();
      e = binary(op, std::move(e), parse_concat(), line);
    }
    return e;
  }

  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      const int line = cur().line;
      advance();
      e = binary("~", std::move(e), parse_math2(), line);
    }
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string op = cur().text;
      const int line = cur().line;
      advance();
      e = binary(op, std::move(e), parse_pow(), line);
    }
    return e;
  }

  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      const int line = cur().line;
      advance();
      e = binary("**", std::move(e), parse_unary(true), line);
    }
    return e;
  }

  ExprPtr parse_unary(bool with_filter) {
    const DepthGuard guard(this);
    const int line = cur().line;
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const bool minus = is_op("-");
      advance();
      e = std::make_unique<Expr>(minus ? Expr::Kind::Negate : Expr::Kind::Plus, line);
      e->items.push_back(parse_unary(false));
    } else {
      e = parse_postfix(parse_primary());
    }
    return with_filter ? parse_filter_chain(std::move(e)) : std::move(e);
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    const int line = t.line;
    auto literal = [&](Value v) {
      auto e = std::make_unique<Expr>(Expr::Kind::Literal, line);
      e->value = std::move(v);
      return e;
    };
    switch (t.kind) {
      case TokenKind::Name: {
        const std::string name = t.text;
        advance();
        if (name == "true" || name == "True") return literal(Value(true));
        if (name == "false" || name == "False") return literal(Value(false));
        if (name == "none" || name == "None") return literal(Value::none());
        auto e = std::make_unique<Expr>(Expr::Kind::Name, line);
        e->name = name;
        return e;
      }
      case TokenKind::String: {
        std::string s = t.text;
        advance();
        while (cur().kind == TokenKind::String) {  // adjacent literals join, as in Python
          s += cur().text;
          advance();
        }
        return literal(Value(std::move(s)));
      }
      case TokenKind::Int: {
        const int64_t v = t.int_value;
        advance();
        return literal(Value(v));
      }
      case TokenKind::Float: {
        const double v = t.float_value;
        advance();
        return literal(Value(v));
      }
      case TokenKind::Operator:
        if (t.text == "(") {
          advance();
          if (skip_op(")")) return std::make_unique<Expr>(Expr::Kind::List, line);
          ExprPtr e = parse_expression(true);
          if (is_op(",")) {
            auto list = std::make_unique<Expr>(Expr::Kind::List, line);
            list->items.push_back(std::move(e));
            while (skip_op(",")) {
              if (is_op(")")) break;
              list->items.push_back(parse_expression(true));
            }
            e = std::move(list);
          }
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          advance();
          auto list = std::make_unique<Expr>(Expr::Kind::List, line);
          while (!skip_op("]")) {
            if (!list->items.empty()) expect_op(",");
            if (skip_op("]")) break;
            list->items.push_back(parse_expression(true));
          }
          return list;
        }
        if (t.text == "{") {
          advance();
          auto dict = std::make_unique<Expr>(Expr::Kind::Dict, line);
          while (!skip_op("}")) {
            if (!dict->items.empty()) expect_op(",");
            if (skip_op("}")) break;
            dict->items.push_back(parse_expression(true));
            expect_op(":");
            dict->items.push_back(parse_expression(true));
          }
          return dict;
        }
        break;
      default: break;
    }
    fail("unexpected " + describe(t));
  }

  std::vector<ExprPtr> parse_call_args(std::vector<std::pair<std::string, ExprPtr>>* kwargs) {
    std::vector<ExprPtr> args;
    expect_op("(");
    bool first = true;
    while (!skip_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (skip_op(")")) break;
      if (is_op("*") || is_op("**")) {  // f(*list, **dict): kept as the keyword "*" / "**", expanded when called
        std::string splat = cur().text;
        advance();
        kwargs->emplace_back(std::move(splat), parse_expression(true));
      } else if (cur().kind == TokenKind::Name && peek().kind == TokenKind::Operator && peek().text == "=") {
        std::string name = cur().text;
        advance();
        advance();
        kwargs->emplace_back(std::move(name), parse_expression(true));
      } else {
        if (!kwargs->empty()) fail("a positional argument follows a keyword argument");
        args.push_back(parse_expression(true));
      }
    }
    return args;
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      const int line = cur().line;
      if (skip_op(".")) {
        auto a = std::make_unique<Expr>(Expr::Kind::Attr, line);
        if (cur().kind == TokenKind::Int) {  // a.0: an index, as Jinja allows
          a->kind = Expr::Kind::Subscript;
          a->items.push_back(std::move(e));
          auto idx = std::make_unique<Expr>(Expr::Kind::Literal, line);
          idx->value = Value(cur().int_value);
          a->items.push_back(std::move(idx));
          advance();
        } else {
          a->name = expect_identifier();
          a->items.push_back(std::move(e));
        }
        e = std::move(a);
      } else if (is_op("[")) {
        advance();
        ExprPtr parts[3];
        int colons = 0;
        for (int k = 0; k < 3; ++k) {
          if (!is_op(":") && !is_op("]")) parts[k] = parse_expression(true);
          if (k < 2 && skip_op(":")) {
            ++colons;
            continue;
          }
          break;
        }
        expect_op("]");
        if (colons == 0) {
          if (!parts[0]) fail("empty subscript", line);
          auto s = std::make_unique<Expr>(Expr::Kind::Subscript, line);
          s->items.push_back(std::move(e));
          s->items.push_back(std::move(parts[0]));
          e = std::move(s);
        } else {
          auto s = std::make_unique<Expr>(Expr::Kind::Slice, line);
          s->items.push_back(std::move(e));
          for (auto& p : parts) s->items.push_back(std::move(p));
          e = std::move(s);
        }
      } else if (is_op("(")) {
        auto c = std::make_unique<Expr>(Expr::Kind::Call, line);
        c->items.push_back(std::move(e));
        for (ExprPtr& a : parse_call_args(&c->kwargs)) c->items.push_back(std::move(a));
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  // `| f(args) | g` and `is [not] test arg` after an operand; a filter block's chain has no operand (and
  // no leading pipe).
  ExprPtr parse_filter_chain(ExprPtr e, bool leading_pipe = true) {
    bool first = true;
    while (true) {
      const int line = cur().line;
      const bool pipe = is_op("|");
      if (pipe || (first && !leading_pipe)) {
        if (pipe) advance();
        first = false;
        auto f = std::make_unique<Expr>(Expr::Kind::Filter, line);
        f->name = expect_identifier();
        while (skip_op(".")) f->name += "." + expect_identifier();
        f->items.push_back(std::move(e));
        if (is_op("("))
          for (ExprPtr& a : parse_call_args(&f->kwargs)) f->items.push_back(std::move(a));
        e = std::move(f);
      } else if (e && is_name("is")) {
        advance();
        auto t = std::make_unique<Expr>(Expr::Kind::Test, line);
        t->negated = skip_name("not");
        t->name = expect_identifier();
        t->items.push_back(std::move(e));
        if (is_op("(")) {
          for (ExprPtr& a : parse_call_args(&t->kwargs)) t->items.push_back(std::move(a));
        } else if (test_argument_follows()) {
          t->items.push_back(parse_postfix(parse_primary()));
        }
        e = std::move(t);
      } else if (e && is_op("(")) {
        e = parse_postfix(std::move(e));
      } else {
        return e;
      }
    }
  }

  // `x is divisibleby 3`: a test takes one argument without parentheses when a primary follows.
  bool test_argument_follows() const {
    const Token& t = cur();
    if (t.kind == TokenKind::String || t.kind == TokenKind::Int || t.kind == TokenKind::Float) return true;
    if (t.kind == TokenKind::Operator) return t.text == "[" || t.text == "{";
    if (t.kind != TokenKind::Name) return false;
    static constexpr std::string_view kKeywords[] = {"else", "or", "and", "if", "in", "not", "is", "for", "recursive"};
    return std::find(std::begin(kKeywords), std::end(kKeywords), std::string_view(t.text)) == std::end(kKeywords);
  }
};

}  // namespace

Body parse(const std::vector<Token>& tokens) { return Parser(tokens).parse_template(); }

}  // namespace inflight::server::jinja

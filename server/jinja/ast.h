// The parsed template: expressions and statements, owned by the Template that parsed them.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "server/jinja/value.h"

namespace inflight::server::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Literal,    // value
    Name,       // name
    List,       // items (tuples too)
    Dict,       // items as key, value, key, value, ...
    Attr,       // a.name: items[0], name
    Subscript,  // a[b]: items[0], items[1]
    Slice,      // a[start:stop:step]: items[0], then start/stop/step (null when left out)
    Call,       // items[0](items[1..], kwargs)
    Filter,     // items[0] | name(items[1..], kwargs); items[0] null inside a filter block
    Test,       // items[0] is [not] name(items[1..]); negated
    Not,        // not items[0]
    Negate,     // -items[0]
    Plus,       // +items[0]
    Binary,     // items[0] name items[1]: or and + - * / // % ** ~
    Compare,    // items[0] ops[0] items[1] ops[1] items[2] ...: == != < > <= >= in, not in
    Ternary,    // items[0] if items[1] else items[2] (items[2] null: undefined)
  };
  Kind kind;
  int line = 0;
  Value value;                                         // Literal
  std::string name;                                    // Name, Attr, Filter, Test; Binary: the operator
  std::vector<ExprPtr> items;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;  // Call, Filter ("*" / "**": f(*list, **dict))
  bool negated = false;                                // Test
  std::vector<std::string> ops;                        // Compare

  Expr(Kind k, int l) : kind(k), line(l) {}
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null: required
};

struct Stmt {
  enum class Kind {
    Text,         // text
    Output,       // {{ expr }}
    If,           // conditions[i] -> bodies[i]; else_body
    For,          // for targets in expr [if filter]: body; else_body
    Set,          // set targets (or attr_object.attr) = expr
    SetBlock,     // set targets[0] %} body {% endset (expr: the filter chain, or null)
    Macro,        // macro name(params): body
    CallBlock,    // call(params) expr: body (the body is `caller`)
    FilterBlock,  // filter expr: body
    Break,
    Continue,
  };
  Kind kind;
  int line = 0;
  std::string text;                    // Text; Macro: its name; Set on an attribute: the attribute
  ExprPtr expr;
  ExprPtr filter;                      // For: the `if` filter
  std::vector<std::string> targets;    // For, Set, SetBlock
  std::string attr_object;             // Set ns.attr = ...: "ns"
  std::vector<ExprPtr> conditions;     // If
  std::vector<Body> bodies;            // If: one per condition
  Body body;
  Body else_body;
  std::vector<MacroParam> params;      // Macro, CallBlock

  Stmt(Kind k, int l) : kind(k), line(l) {}
};

}  // namespace inflight::server::jinja

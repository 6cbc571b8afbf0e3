// The Jinja parser: tokens into statements, with Jinja's operator precedence (lowest first):
// `a if b else c`, or, and, not, comparisons and `in` (chained), + -, ~, * / // %, **, unary - +,
// then postfix (.attr, [index], [a:b:c], calls), filters `|` and tests `is`.
#pragma once
#include <vector>

#include "server/jinja/ast.h"
#include "server/jinja/lexer.h"

namespace inflight::server::jinja {

// Throws Error (Syntax) with the line for anything malformed: an unknown tag, a missing end tag,
// an unexpected token.
Body parse(const std::vector<Token>& tokens);

}  // namespace inflight::server::jinja

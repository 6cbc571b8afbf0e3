// The Jinja lexer: template text into tokens, with whitespace control applied to the text between tags.
// Settings as Hugging Face renders chat templates: trim_blocks (the newline after a block or comment tag
// is dropped), lstrip_blocks (spaces and tabs before a block or comment tag at the start of a line are
// dropped), and one trailing newline of the template dropped (keep_trailing_newline off). `{%-` / `-%}`
// (and `{{-`, `-}}`, `{#-`, `-#}`) strip all whitespace on their side; `{%+` keeps the line's indent.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace inflight::server::jinja {

enum class TokenKind {
  Text,        // template data, whitespace control applied
  VarBegin,    // {{
  VarEnd,      // }}
  BlockBegin,  // {%
  BlockEnd,    // %}
  Name,        // identifiers and keywords (and, or, not, in, is, if, else, true, none, ...)
  String,      // a literal, escapes resolved
  Int,
  Float,
  Operator,    // + - * / // % ** ~ == != < > <= >= = ( ) [ ] { } , . : |
  End,
};

struct Token {
  TokenKind kind = TokenKind::End;
  std::string text;  // Text / Name / String / Operator
  int64_t int_value = 0;
  double float_value = 0.0;
  int line = 1;      // 1-based line of the template where the token starts
};

// Throws Error (Syntax) for an unclosed tag, comment or string, and for a character no token starts with.
std::vector<Token> tokenize(std::string_view source);

}  // namespace inflight::server::jinja

// Structured output as a fixed list of strings (vLLM `structured_outputs: {choice: [...]}`), and the GBNF text
// helpers that every converter here (choice, regex.h, json_schema.h) writes its literals and classes with.
//
// Every form of structured output becomes GBNF text (llama.cpp's syntax) that parse_gbnf (grammar.h) compiles; the
// helpers below are the one place that knows how GBNF escapes a character.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/grammar/grammar.h"  // GrammarError

namespace inflight::engine::grammar {

// GBNF rules for the rest of a JSON string after its opening quote, closing quote included, whose text is none of
// `names` as JSON writes them (an additional property's key beside the declared ones). A trie of the names'
// spellings: each node a rule offering its children, any other character (then any characters), or the closing
// quote where no name ends. Compared as written: a name spelled with \u escapes is not recognised, and after a
// name's escaped character no other escape is offered (stricter, never looser). Returns (rule name, body) pairs
// named `prefix`-N, the start rule first; `json_char` names the rule of one JSON string character.
std::vector<std::pair<std::string, std::string>> json_string_none_of(const std::vector<std::string>& names,
                                                                     const std::string& prefix,
                                                                     const std::string& json_char);

// The inside of a JSON string (no quotes) in JSON Schema `format` `format`, as one GBNF expression; "" for a
// format not listed. date: YYYY-MM-DD, days per month exact, 02-29 in leap years only; time: HH:MM:SS[.1-9
// digits](Z|+HH:MM), Z/z, second 60 only as 23:59:60 with Z or a zero offset (a leap second); date-time: date T time (T/t); uuid: 8-4-4-4-12 hex digits; email: dot-atom
// local part of 1-64 characters @ two or more dot-separated LDH labels; ipv4: dotted decimal without leading
// zeros; ipv6: RFC 4291's text forms (one "::", a trailing dotted IPv4). Plain characters only, no JSON escapes.
std::string json_format_gbnf(std::string_view format);

// GBNF for exactly one of `choices` (the whole output is one of them, byte for byte): `root ::= "a" | "b"`.
// Throws GrammarError for an empty list or a choice that is not valid UTF-8. An empty string is a valid choice.
std::string choice_to_gbnf(const std::vector<std::string>& choices, std::string_view root = "root");

// A GBNF string literal matching `text` exactly: `"a\"b"`. Characters below 0x20, `"` and `\` are escaped;
// other characters stay raw UTF-8. Throws GrammarError when `text` is not valid UTF-8.
std::string gbnf_literal(std::string_view text);

// One code point as written inside a GBNF character class (`[...]`): ASCII letters and digits raw, other
// code points up to U+FFFF as \xHH / \uHHHH (so `]`, `-`, `^` and `\` never need thought), above as raw UTF-8.
std::string gbnf_class_char(uint32_t code_point);

// A character class over inclusive code point ranges: `[a-z0-9]`, or `[^...]` when the set holds U+10FFFF
// (its complement is then the shorter list). `ranges` must be sorted, disjoint and non-empty; the full set is `.`.
struct CodePointRange {
  uint32_t first;
  uint32_t last;  // inclusive
};
std::string gbnf_class(const std::vector<CodePointRange>& ranges);

// An alternation of GBNF expressions, parenthesised when it has more than one. An empty string stands for the
// empty match: the result is then `( ... )?`, since the text here never holds an empty alternative; all empty: "".
std::string gbnf_alternation(const std::vector<std::string>& alternatives);
// A sequence of GBNF expressions joined by spaces, the empty ones left out.
std::string gbnf_sequence(std::initializer_list<std::string> parts);

// Decodes UTF-8 into code points; throws GrammarError naming `what` on invalid UTF-8 (surrogates, overlongs).
std::vector<uint32_t> decode_utf8(std::string_view text, std::string_view what);
void append_utf8(std::string& out, uint32_t code_point);

}  // namespace inflight::engine::grammar

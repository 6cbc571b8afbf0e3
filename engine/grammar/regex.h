// Regular expressions (ECMAScript syntax, the subset below) to GBNF: vLLM's `structured_outputs: {regex: ...}` and
// JSON Schema's `pattern`. The output is GBNF rules whose root rule matches exactly the pattern's language.
//
// Supported, with ECMAScript's meaning:
//   literals; `.` (any code point but \n \r U+2028 U+2029); classes `[...]` `[^...]` with ranges and the
//   escapes below (`[]` matches nothing and is an error, `[^]` matches anything); `\d \w \s \D \W \S`;
//   `\n \t \r \v \f \0 \xHH \uHHHH \cX`; `\` before any non-alphanumeric character (the character itself);
//   quantifiers `* + ? {m} {m,} {m,n}` (n at most RegexOptions::max_repetition) and their lazy forms (`*?` etc.:
//   for a language, lazy and greedy are the same); groups `( )` `(?: )` `(?<name> )`; alternation `|`;
//   `^` at the start and `$` at the end of a top-level alternative. A `{` that does not begin a quantifier is a
//   literal, as in ECMAScript's Annex B.
// Groups nest at most 256 deep. Refused with a GrammarError naming the construct and its byte offset:
// backreferences (`\1`, `\k<name>`),
// lookarounds (`(?=` `(?!` `(?<=` `(?<!`), word boundaries `\b \B`, anchors anywhere else, `\p{...}`,
// unknown letter escapes, and flags / modifiers.
//
// Matching is whole-string (vLLM's regex is implicitly anchored: `^` and `$` at the ends change nothing) unless
// RegexOptions::search: then, as JSON Schema's `pattern` asks, the pattern may match anywhere, so each top-level
// alternative without `^` gets any text before it and one without `$` any text after it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "engine/grammar/choice.h"  // GrammarError and the GBNF helpers

namespace inflight::engine::grammar {

struct RegexOptions {
  bool search = false;      // JSON Schema's `pattern`: match anywhere unless anchored
  bool json_string = false; // the text is the inside of a JSON string: a character matches in its JSON form
                            // (`"` as \", `\` as \\, `/` as / or \/, \b \f \n \r \t, other controls \u00XX)
  std::string root = "root";       // the name of the rule that matches the pattern
  std::string rule_prefix = "re";  // the prefix of every helper rule's name (must be unique within a grammar)
  int max_repetition = 10000;      // the largest m or n of {m,n}; larger is a GrammarError
};

// The GBNF rules for `pattern` (the root rule first). Throws GrammarError on syntax errors and unsupported
// constructs, with the byte offset into `pattern`.
std::string regex_to_gbnf(std::string_view pattern, const RegexOptions& options = {});

// Decimal number ranges, the other regular languages JSON Schema needs (`minimum` and friends). Each returns one
// GBNF expression (no rules of its own) for the JSON numbers in the range: integers as `-?(0|[1-9][0-9]*)`,
// numbers as that with an optional `.digits` (no exponent). Exact: every accepted text's value is in the range
// and every value in it is accepted in some form. Bounds are the schema's doubles, at most 1e18 in magnitude, as
// the decimals JavaScript prints for them (0.1 is 0.1). An empty range, or a bound beyond 1e18, is a GrammarError.
struct NumberBounds {
  std::optional<double> minimum, maximum;                      // inclusive
  std::optional<double> exclusive_minimum, exclusive_maximum;  // exclusive
};
std::string integer_range_gbnf(const NumberBounds& bounds);
std::string number_range_gbnf(const NumberBounds& bounds);

// JSON numbers that are multiples of `k` (1 <= k), as rules (the root rule `name`): an integer's digits run
// through a remainder automaton of k rules `name`-0 .. `name`-(k-1). with_zero_fraction: a number, so also the
// integer followed by "." and zeros (4.0 is a multiple of 2). No exponent.
std::string multiple_of_gbnf(uint32_t k, bool with_zero_fraction, const std::string& name);

// A double as JavaScript prints it (JSON.stringify): integers below 1e21 in full, else the shortest digits that
// read back the same, with an exponent outside [1e-6, 1e21): 1, 1.5, 1e+21, 1.5e-7.
std::string js_number(double value);

}  // namespace inflight::engine::grammar

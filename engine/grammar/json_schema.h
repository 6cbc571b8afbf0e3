// JSON Schema to GBNF: OpenAI's `response_format: {type: json_schema}`, vLLM's `structured_outputs: {json: ...}`,
// llama.cpp's `json_schema`. The GBNF's root rule matches the JSON texts the schema accepts, written compactly
// (`{"a":1,"b":[1,2]}`: no whitespace unless JsonSchemaOptions::any_whitespace). A keyword outside the table below
// is a GrammarError naming it and its JSON pointer (`unsupported JSON Schema keyword "not" at /properties/a`):
// nothing is skipped silently, and nothing compiles to a grammar that accepts an instance the schema rejects,
// except where the table says so.
//
// | keyword | support |
// |---|---|
// | title description default examples $schema $id id $comment deprecated readOnly writeOnly | ignored (annotations) |
// | discriminator | ignored: OpenAPI's (Pydantic writes it beside oneOf); it changes no instance's validity, the branches themselves decide |
// | $defs definitions | containers for $ref; a definition is compiled only when referenced |
// | type | string, number, integer, boolean, null, object, array, or a list; absent: every type, each with the keywords that apply to it |
// | enum const | any JSON values, as their compact JSON text (numbers in JavaScript's shortest form: 1, 1.5, 1e+21; object keys in the value's order); the schema's other keywords filter the values (each value's text is run through the grammar of the rest; an object value whose keys are not in the properties' order is dropped) |
// | $ref | "#" and "#/json/pointer" into the root schema (~0 ~1 and %XX decoded); recursion allowed; each target is one named rule. With sibling keywords: merged with them, as allOf (2019-09 semantics) |
// | anyOf | alternation; sibling keywords are merged into each branch |
// | oneOf | alternation, accepted only when its branches are provably disjoint (pairwise different types, different const/enum values, or a required property with different const/enum values in each branch); otherwise an error (use anyOf) |
// | allOf | merged into one schema: type sets intersect, properties / required / additionalProperties and prefixItems / items combine exactly, bounds take the tighter value, enum/const intersect, equal values of the other keywords merge; anything else is an error naming allOf |
// | properties | emitted in the schema's order (see "key order"); a property whose schema is false may not appear |
// | required | names beyond `properties` are required keys whose value matches additionalProperties (after the declared ones, in `required` order) |
// | additionalProperties | true (the default), false or a schema; additional keys come after the declared ones, and may not be spelled like a declared key (compared as written: a declared name spelled with \u escapes is not recognised) |
// | items prefixItems | schema, or (draft 4-2019) an array of schemas = prefixItems with additionalItems for the rest; items false allowed |
// | additionalItems | beside an items array |
// | minItems maxItems | bounded repetition {m,n}, n <= max_repetition |
// | uniqueItems | false only (true is an error) |
// | minLength maxLength | code points as bounded repetition of the string character (an escape is one character; a surrogate-pair escape counts as two) |
// | pattern | ECMAScript regex (regex.h), unanchored unless ^/$ as the spec says; characters in their plain JSON form (no \uXXXX for printable ones); not with minLength/maxLength/format |
// | format | date (YYYY-MM-DD, days per month exact, 02-29 in leap years only), time (HH:MM:SS[.frac](Z|+HH:MM); second 60 only as 23:59:60 in UTC: Z or ±00:00), date-time (date T time, T/Z in either case; a space for T is refused), uuid (8-4-4-4-12 hex), email (dot-atom local part of 1-64 characters @ dot-separated LDH labels, at least two), ipv4 (dotted decimal, no leading zeros), ipv6 (RFC 4291 text forms with :: and a trailing IPv4), uri (RFC 3986's URI: scheme ":" hier-part ["?" query] ["#" fragment], ASCII only, the empty path refused as ajv-formats does); other formats are errors |
// | minimum maximum exclusiveMinimum exclusiveMaximum | integer: exact digit automata for the range; number: exact (integer part automaton, fraction digits compared as decimals; bounds as the decimals JavaScript prints), written without an exponent; bounds above 1e18 in magnitude are errors. Draft 4's boolean exclusiveMinimum/Maximum is accepted |
// | multipleOf | an integer k from 1 to 1000, without minimum/maximum: a remainder automaton over the digits (k rules); numbers may add "." and zeros |
// | minProperties maxProperties | exact over the members as written: the object rules carry the count (properties x count rules); an additional key written twice counts twice (below) |
// | not | of `type` only (and true, false, {}): the types named are removed; "not integer" leaves numbers with a non-zero fraction digit, written without an exponent, and no bounds/multipleOf beside it |
// | if then else patternProperties propertyNames dependencies dependentRequired dependentSchemas contains minContains maxContains unevaluatedProperties unevaluatedItems $anchor $dynamicRef $dynamicAnchor $recursiveRef, anything else | error |
//
// Key order: properties appear in the schema's order (a schema parsed with nlohmann::json instead of ordered_json
// has them alphabetically); merged schemas list a schema's own properties, then its allOf branches' depth-first,
// then its $ref target's, then an anyOf/oneOf branch's; an instance with another order is rejected.
// A subschema no value can match (minLength > maxLength, an empty range, a required property with schema false,
// ...) drops out where the value may be absent or another alternative remains (one type of several, an anyOf
// branch, an optional property, an array position); elsewhere it is a GrammarError. A schema that reaches itself
// through $ref before writing a character ({"anyOf": [{"$ref": "#"}, ...]}) is left recursive: parse_gbnf refuses
// its grammar. Numbers: unbounded ones in any JSON form, integers without fraction or exponent. Strings: any
// escapes, except as the pattern row says. Repeated keys: a grammar cannot compare keys, so an additional key may
// be written twice (declared keys cannot: each has one place); a JSON parser keeping the last value then sees one
// member fewer than minProperties counted.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "engine/grammar/choice.h"  // GrammarError

namespace inflight::engine::grammar {

struct JsonSchemaOptions {
  // Allow whitespace between tokens: at most one space, tab or newline, a newline followed by up to 32 spaces or
  // tabs of indentation. Never unbounded. Off: the compact form only.
  bool any_whitespace = false;
  size_t max_grammar_bytes = size_t{1} << 20;  // a larger grammar is refused
  int max_depth = 128;                          // nesting of subschemas (and of $ref merges); the schema's JSON
                                                // text may nest 4 x max_depth levels (enum values included)
  int max_repetition = 10000;                   // the largest minItems/maxItems/minLength/maxLength/{m,n}
};

// The GBNF (root rule `root`) for `schema`. Throws GrammarError on unsupported keywords, invalid schemas,
// unsatisfiable ones it can see, and grammars over the limits.
std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema, const JsonSchemaOptions& options = {});
// The same from the schema's JSON text (keys keep their order); a parse error is a GrammarError.
std::string json_schema_to_gbnf(std::string_view schema_json, const JsonSchemaOptions& options = {});
// The same from a nlohmann::json, whose objects are sorted by key: properties come out in alphabetical order.
std::string json_schema_to_gbnf(const nlohmann::json& schema, const JsonSchemaOptions& options = {});

// Any JSON object (OpenAI's `response_format: {type: json_object}`), and any JSON value.
std::string json_object_gbnf(const JsonSchemaOptions& options = {});
std::string any_json_gbnf(const JsonSchemaOptions& options = {});

}  // namespace inflight::engine::grammar

// Structured output: the request fields that constrain what a completion may say, in the three dialects
// clients send, compiled into the one grammar the engine masks tokens with (engine/grammar/):
//
// | field | dialect | constraint |
// |---|---|---|
// | `response_format: {"type": "json_object"}` | OpenAI | any JSON object |
// | `response_format: {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}` | OpenAI | JSON fitting the schema |
// | `response_format: {"type": "text"}` | OpenAI | none |
// | `structured_outputs: {"json" \| "regex" \| "choice" \| "grammar" \| "json_object": ...}` | vLLM | one of them |
// | `guided_json`, `guided_regex`, `guided_choice`, `guided_grammar` | vLLM (older names) | the same |
// | `json_schema` (a schema), `grammar` (GBNF) | llama.cpp | the same |
//
// One constraint per request: two are a 400. A schema, regex or grammar that does not compile, or uses what
// the compilers refuse, is a 400 naming the field and the problem (engine/grammar/json_schema.h lists the
// JSON Schema keywords). JSON comes out compact (`{"a":1}`).
#pragma once
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/grammar/grammar.h"

namespace inflight::server {

struct StructuredOutput {
  std::shared_ptr<const engine::grammar::Grammar> grammar;  // nullptr: unconstrained
  std::string kind;  // "json_schema", "json_object", "regex", "choice" or "grammar"; empty when unconstrained
  double compile_seconds = 0;  // the constraint to its grammar (a cached grammar: the conversion and lookup)
};

// Reads the fields above from `body` (the client's key order: a schema's properties come out in it). Throws
// BadRequest naming the field.
StructuredOutput parse_structured_output(const nlohmann::ordered_json& body);

}  // namespace inflight::server

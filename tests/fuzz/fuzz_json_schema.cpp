// JSON Schema from a request (`response_format: {type: json_schema}`): any bytes as the schema's JSON text →
// json_schema_to_gbnf, compact and with any_whitespace → parse_gbnf; one of the two grammars (picked by the
// input's hash, as fuzz_regex does) → a Matcher walked for up to 8 tokens, steered by the input's last bytes
// (grammar_walk.h). Besides the sanitizers: only GrammarError may escape (the server's 400), and the matcher
// agrees with itself (grammar_walk.h's checks).
#include <cstdint>
#include <functional>
#include <string_view>

#include "engine/grammar/grammar.h"
#include "engine/grammar/json_schema.h"
#include "grammar_walk.h"

namespace grammar = inflight::engine::grammar;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::string_view steer = text.substr(size - std::min<size_t>(size, 8));
  const bool walked = std::hash<std::string_view>{}(text) % 2;
  for (const bool any_whitespace : {false, true}) {
    grammar::JsonSchemaOptions options;
    options.any_whitespace = any_whitespace;
    try {
      const auto g = grammar::parse_gbnf(grammar::json_schema_to_gbnf(text, options));
      if (any_whitespace == walked) inflight::fuzz::walk_grammar(g, steer);
    } catch (const grammar::GrammarError&) {
    }
  }
  return 0;
}

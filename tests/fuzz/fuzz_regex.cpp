// Regular expressions from a request (vLLM's `structured_outputs: {regex: ...}`, JSON Schema's `pattern`): any
// bytes as the pattern → regex_to_gbnf whole-match and search, each as raw text and inside a JSON string →
// parse_gbnf; one of the four grammars (picked by the pattern's hash) → a Matcher walked for up to 8 tokens,
// steered by the pattern's last bytes (grammar_walk.h). Besides the sanitizers: only GrammarError may escape
// (the server's 400), the four forms of a pattern are all refused or all compiled, and the matcher agrees with
// itself (grammar_walk.h's checks).
// NOTE: one walk, not four: the walks are most of an input's time (a few ms each under ASan), and the hash
// still walks every form over the run.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "engine/grammar/grammar.h"
#include "engine/grammar/regex.h"
#include "grammar_walk.h"

namespace grammar = inflight::engine::grammar;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view pattern(reinterpret_cast<const char*>(data), size);
  const std::string_view steer = pattern.substr(size - std::min<size_t>(size, 8));
  const size_t walked = std::hash<std::string_view>{}(pattern) % 4;
  int num_refused = 0;
  for (size_t form = 0; form < 4; ++form) {
    grammar::RegexOptions options;
    options.search = form & 1;
    options.json_string = form & 2;
    std::string gbnf;
    try {
      gbnf = grammar::regex_to_gbnf(pattern, options);
    } catch (const grammar::GrammarError&) {
      ++num_refused;
      continue;
    }
    try {
      const auto g = grammar::parse_gbnf(gbnf);
      if (form == walked) inflight::fuzz::walk_grammar(g, steer);
    } catch (const grammar::GrammarError&) {
    }
  }
  // The options change what a character matches, never whether the pattern is valid.
  if (num_refused != 0 && num_refused != 4) __builtin_trap();
  return 0;
}

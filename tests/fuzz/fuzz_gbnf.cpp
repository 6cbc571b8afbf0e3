// GBNF from a request (llama.cpp's `grammar`): any bytes as grammar text → parse_gbnf → a Matcher walked for up
// to 8 tokens, steered by the text's last bytes (grammar_walk.h); compile_cached of the same text. Besides the
// sanitizers: only GrammarError may escape (the server's 400); compile_cached refuses exactly what parse_gbnf
// refuses, builds the same grammar and hands back its cached one the second time; to_gbnf() parses again
// (unless past the size limits) to a grammar that takes the steering bytes the same way; and the matcher agrees
// with itself (grammar_walk.h's checks).
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "engine/grammar/grammar.h"
#include "engine/grammar/matcher.h"
#include "grammar_walk.h"

namespace grammar = inflight::engine::grammar;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::string_view steer = text.substr(size - std::min<size_t>(size, 8));
  std::shared_ptr<const grammar::Grammar> g;
  try {
    g = grammar::parse_gbnf(text);
  } catch (const grammar::GrammarError&) {
  }
  std::shared_ptr<const grammar::Grammar> cached;
  try {
    cached = grammar::compile_cached(text);
  } catch (const grammar::GrammarError&) {
  }
  if (!g != !cached) __builtin_trap();
  if (!g) return 0;
  const std::string printed = g->to_gbnf();
  if (cached->to_gbnf() != printed) __builtin_trap();
  if (grammar::compile_cached(text) != cached) __builtin_trap();

  std::shared_ptr<const grammar::Grammar> again;
  try {
    again = grammar::parse_gbnf(printed);
  } catch (const grammar::GrammarError& e) {
    if (std::string_view(e.what()).find("too large") == std::string_view::npos) __builtin_trap();
  }
  try {
    inflight::fuzz::walk_grammar(g, steer);
    if (again) {
      grammar::Matcher first(g, inflight::fuzz::grammar_vocab()), second(again, inflight::fuzz::grammar_vocab());
      const bool ok = first.accept_bytes(steer);
      if (second.accept_bytes(steer) != ok || (ok && first.can_end() != second.can_end())) __builtin_trap();
    }
  } catch (const grammar::GrammarError&) {
  }
  return 0;
}

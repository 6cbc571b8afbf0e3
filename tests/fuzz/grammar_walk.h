// Shared by the structured-output fuzz targets (fuzz_json_schema, fuzz_regex, fuzz_gbnf): a small byte
// vocabulary and a short walk of a Matcher through a compiled grammar, steered by bytes of the input, with the
// matcher's own consistency as the oracle (a disagreement traps):
//   - fill_mask equals fill_mask_uncached (the mask cache changes nothing), EOS's bit is can_end();
//   - allows(id) agrees with the mask for the steering byte's token, and a token the mask allows is accepted;
//   - forced_bytes(), when not empty, is the only single byte the mask allows first, and is accepted;
//   - accept_bytes(s) accepts exactly when accepting s's bytes one token at a time does, to the same can_end;
//   - after rollback(k) the mask is the one k steps back.
// The mask and accept calls may throw GrammarError (a grammar too ambiguous for the stack limits): the caller
// lets only that escape its try.
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/grammar/grammar.h"
#include "engine/grammar/matcher.h"
#include "engine/grammar/token_vocab.h"

namespace inflight::fuzz {

// Ids 0..255: the single bytes (id b is byte b). Then pieces a tokenizer would have: JSON punctuation and
// words, escapes, whitespace runs, whole UTF-8 characters of 2, 3 and 4 bytes, and the first half of a 4-byte
// one (a token ending inside a character). Last: EOS, with no bytes.
inline std::shared_ptr<const engine::grammar::TokenVocab> grammar_vocab() {
  static const auto vocab = [] {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.emplace_back(1, char(b));
    for (const char* piece : {"{\"", "\":", "\",\"", "\":\"", "\"}", "},{", "[]", "{}", "true", "false", "null",
                              "12", "-0.5", "e+", "\\n", "\\\"", "\\u00", "ab", "abc", "  ", "\n  ", "root", " ::= ",
                              "\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80", "\xF0\x9F", "\xC3\xA9t"})
      tokens.emplace_back(piece);
    tokens.emplace_back();  // EOS
    const int32_t eos = int32_t(tokens.size()) - 1;
    return std::make_shared<const engine::grammar::TokenVocab>(std::move(tokens), eos);
  }();
  return vocab;
}

inline bool mask_bit(const std::vector<uint32_t>& mask, int32_t id) { return (mask[size_t(id) / 32] >> (id % 32)) & 1; }

// Walks `grammar` for up to steer.size() tokens: at each step the token of the steering byte if the mask allows
// it, else the (byte % count)-th allowed one. Throws GrammarError where the matcher does.
inline void walk_grammar(const std::shared_ptr<const engine::grammar::Grammar>& grammar, std::string_view steer) {
  using engine::grammar::Matcher;
  const auto vocab = grammar_vocab();
  const int32_t eos = vocab->eos_id();
  const size_t num_words = (size_t(vocab->size()) + 31) / 32;

  // Bytes at once against one token a byte.
  {
    Matcher whole(grammar, vocab), bytewise(grammar, vocab, 1);
    const bool whole_ok = whole.accept_bytes(steer);
    bool bytewise_ok = true;
    for (const char c : steer) bytewise_ok = bytewise_ok && bytewise.accept_token(int32_t(uint8_t(c)));
    if (whole_ok != bytewise_ok) __builtin_trap();
    if (whole_ok && whole.can_end() != bytewise.can_end()) __builtin_trap();
  }

  Matcher m(grammar, vocab, std::max(1, int(steer.size())));
  std::vector<std::vector<uint32_t>> masks;  // [step][num_words]: the mask before each accepted token
  std::vector<uint32_t> mask(num_words), uncached(num_words);
  for (const char c : steer) {
    m.fill_mask(mask);
    m.fill_mask_uncached(uncached);
    if (mask != uncached) __builtin_trap();
    if (mask_bit(mask, eos) != m.can_end()) __builtin_trap();
    const int32_t byte = uint8_t(c);
    if (m.allows(byte) != mask_bit(mask, byte)) __builtin_trap();

    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < vocab->size(); ++id)
      if (id != eos && mask_bit(mask, id)) allowed.push_back(id);
    const std::string forced = m.forced_bytes();
    if (!forced.empty()) {
      int num_bytes_allowed = 0;
      for (int32_t b = 0; b < 256; ++b) num_bytes_allowed += mask_bit(mask, b);
      if (num_bytes_allowed != 1 || !mask_bit(mask, uint8_t(forced[0]))) __builtin_trap();
      Matcher ahead = m;
      if (!ahead.accept_bytes(forced)) __builtin_trap();
    }
    if (allowed.empty()) break;
    const int32_t id = mask_bit(mask, byte) ? byte : allowed[size_t(byte) % allowed.size()];
    if (!m.accept_token(id)) __builtin_trap();
    masks.push_back(mask);
  }

  // Back one token, then to the start: the masks seen there before.
  for (const int k : {1, m.num_rollback_tokens() - 1}) {
    if (k < 1 || k > m.num_rollback_tokens()) continue;
    m.rollback(k);
    m.fill_mask(mask);
    if (mask != masks[size_t(m.num_rollback_tokens())]) __builtin_trap();
  }
}

}  // namespace inflight::fuzz

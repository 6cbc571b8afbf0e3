// The tokenizer targets' oracle (fuzz_tokenizer: sentencepiece; fuzz_bpe: tokenizer.json BPE): one input
// is a mode byte and the rest. Encode any bytes (ids in the vocabulary), or decode the rest as 16-bit ids:
// ids outside the vocabulary give std::invalid_argument, ids inside never do, and detokenizing
// incrementally as the server streams gives the same text as one decode.
#pragma once
#include <algorithm>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer.h"

namespace inflight::fuzz {

// mode bit 0: encode (else decode); bit 1: encode with BOS / decode ids outside the vocabulary too;
// bits 2-6: how many leading ids are the prompt of the incremental detokenizer.
inline void check_tokenizer(const engine::Tokenizer& tok, uint8_t mode, std::string_view rest) {
  const int n = tok.vocab_size();
  if (mode & 1) {
    const std::vector<int32_t> ids = tok.encode(rest, (mode & 2) != 0);
    for (int32_t id : ids)
      if (id < 0 || id >= n) __builtin_trap();
    (void)tok.decode(ids);
    return;
  }
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 1 < rest.size(); i += 2) {
    int32_t id = int32_t(uint8_t(rest[i])) | (int32_t(uint8_t(rest[i + 1])) << 8);
    if (mode & 2) id -= 4096;  // negatives and ids past the vocabulary
    else id %= n;
    ids.push_back(id);
  }
  bool in_vocab = true;
  for (int32_t id : ids) in_vocab &= id >= 0 && id < n;
  try {
    const std::string whole = tok.decode(ids);
    if (!in_vocab) __builtin_trap();  // must have been refused
    for (int32_t id : ids) (void)tok.piece(id);
    // Streaming: the first ids are the prompt, the rest arrive one by one. The deltas (and the flushed
    // tail) together are decode(all) after decode(prompt).
    const size_t num_prompt = std::min<size_t>((mode >> 2) & 31, ids.size());
    const std::span<const int32_t> prompt(ids.data(), num_prompt);
    engine::IncrementalDetokenizer detok(tok, prompt);
    std::string streamed;
    for (size_t i = num_prompt; i < ids.size(); ++i) streamed += detok.push(ids[i]);
    streamed += detok.flush();
    const std::string prompt_text = tok.decode(prompt);
    if (whole.compare(0, prompt_text.size(), prompt_text) == 0 && whole.substr(prompt_text.size()) != streamed)
      __builtin_trap();
  } catch (const std::invalid_argument&) {
    if (in_vocab) __builtin_trap();
  }
}

}  // namespace inflight::fuzz

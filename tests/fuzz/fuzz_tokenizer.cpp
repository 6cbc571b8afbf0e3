// The sentencepiece tokenizer (stories260K's tok512.model): encode any bytes, decode any ids (those
// outside the vocabulary must give std::invalid_argument), and detokenize incrementally as the server
// streams, which must give the same text as one decode of the ids.
#include <cstdint>
#include <algorithm>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/tokenizer.h"
#include "fuzz_support.h"

using inflight::engine::Tokenizer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Tokenizer tok = Tokenizer::from_file(inflight::fuzz::stories_dir() + "/tok512.model");
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const int n = tok.vocab_size();
  if (mode & 1) {
    // Encode, then decode what came out.
    const std::vector<int32_t> ids = tok.encode(text, (mode & 2) != 0);
    for (int32_t id : ids)
      if (id < 0 || id >= n) __builtin_trap();
    (void)tok.decode(ids);
  } else {
    // The bytes as 16-bit ids; (mode & 2): any value, else folded into the vocabulary.
    std::vector<int32_t> ids;
    for (size_t i = 1; i + 1 < size; i += 2) {
      int32_t id = int32_t(data[i]) | (int32_t(data[i + 1]) << 8);
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
      // Streaming: the first (mode >> 2) ids are the prompt, the rest arrive one by one. The deltas
      // (and the flushed tail) together are decode(all) after decode(prompt).
      const size_t num_prompt = std::min<size_t>(mode >> 2, ids.size());
      const std::span<const int32_t> prompt(ids.data(), num_prompt);
      inflight::engine::IncrementalDetokenizer detok(tok, prompt);
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
  return 0;
}

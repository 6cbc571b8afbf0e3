// What the Tokenizer facade (tokenizer.h) delegates to: one backend per vocabulary kind
// (sentencepiece: tokenizer_sentencepiece.*; BPE with merges from tokenizer.json or GGUF gpt2: tokenizer_bpe.*).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace inflight::engine {

class TokenizerBackend {
 public:
  virtual ~TokenizerBackend() = default;
  // Ids of `text`, without the special tokens the facade adds around it.
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // Text of valid ids; control/special tokens give none. `continuation`: the ids follow text decoded
  // before, so start-of-text rules (a dropped leading space) must not apply.
  virtual std::string decode(std::span<const int32_t> ids, bool continuation) const = 0;
  // True when decode(ids + rest) == decode(ids) + decode(rest, continuation) for every rest (that does not
  // continue a byte run): the start-of-text rules are behind.
  virtual bool past_leading_space(std::span<const int32_t> ids) const = 0;
  virtual std::string piece(int32_t id) const = 0;        // the vocabulary entry, as stored
  virtual std::string token_bytes(int32_t id) const = 0;  // the bytes the token stands for in text
  virtual int vocab_size() const = 0;
};

}  // namespace inflight::engine

// BPE with ranked merges, the tokenizer of most current models: Hugging Face tokenizer.json (model "BPE",
// byte-level like Llama 3 / Qwen, or byte-fallback sentencepiece-style like Llama 2 / Gemma) and GGUF
// vocabularies with tokenizer.ggml.model = "gpt2". Added tokens are split out before the pipeline
// (normalizer -> pre-tokenizer -> BPE per piece); decoding runs the decoder chain.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/tokenizer_backend.h"
#include "engine/tokenizer_pipeline.h"

namespace inflight::engine {

struct Vocab;

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;  // skipped by decode
  bool lstrip = false, rstrip = false;  // absorb the whitespace before / after it
};

// Everything a BPE tokenizer is made of, whatever file it came from.
struct BpeSpec {
  std::vector<std::string> tokens;  // [vocab_size] the entry of each id ("" for an unused id)
  std::vector<std::pair<std::string, std::string>> merges;  // highest priority first
  std::vector<AddedToken> added;
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<Decoder> decoder;
  bool byte_fallback = false;  // a piece missing from the vocabulary becomes <0xAB> tokens
  bool ignore_merges = false;  // a pre-token already in the vocabulary is one token
  bool fuse_unk = false;
  int32_t unk_id = -1;
  // encode(text, add_special) = prefix_ids + ids + suffix_ids
  std::vector<int32_t> prefix_ids, suffix_ids;
  int32_t bos_id = -1, eos_id = -1;
  // The GGUF tokenizer.ggml.pre this tokenizer's pre-tokenizer is, when it is a known one ("" otherwise).
  std::string gguf_pre;
};

// tokenizer.json (and tokenizer_config.json when not null). Throws LoadError naming `where` for anything
// unsupported or malformed.
BpeSpec bpe_spec_from_json(const nlohmann::json& tokenizer, const nlohmann::json& config, const std::string& where);
// A GGUF gpt2 vocabulary (tokens, token types, merges, pre).
BpeSpec bpe_spec_from_vocab(const Vocab& vocab, const std::string& where);

class BpeTokenizer final : public TokenizerBackend {
 public:
  explicit BpeTokenizer(BpeSpec spec);
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids, bool continuation) const override;
  bool past_leading_space(std::span<const int32_t> ids) const override;
  std::string piece(int32_t id) const override { return spec_.tokens[size_t(id)]; }
  std::string token_bytes(int32_t id) const override;
  int vocab_size() const override { return int(spec_.tokens.size()); }
  const BpeSpec& spec() const { return spec_; }
  // Grows the vocabulary to `n` ids with entries that decode to nothing (a model's padded embedding rows).
  void pad_vocab(int n);

 private:
  struct Merge {
    int32_t rank;
    int32_t result;  // the merged token's id
  };
  static uint64_t pair_key(int32_t a, int32_t b) { return uint64_t(uint32_t(a)) << 32 | uint32_t(b); }
  void encode_segment(std::string text, bool first_segment, std::vector<int32_t>& out) const;
  void encode_word(const std::string& word, std::vector<int32_t>& out) const;
  int32_t find(std::string_view token) const;

  BpeSpec spec_;
  std::unordered_map<std::string, int32_t> ids_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::vector<uint8_t> is_special_;             // [vocab_size]
  std::vector<int32_t> byte_ids_;               // [256] <0xAB> tokens (-1 when absent)
  std::array<std::vector<const AddedToken*>, 256> added_by_first_byte_;  // longest content first
};

}  // namespace inflight::engine

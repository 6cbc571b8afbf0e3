// The text stages of a Hugging Face tokenizer.json around its BPE model: normalizers (NFC, NFKC, NFD,
// NFKD, Lowercase, Replace, Prepend, Sequence), pre-tokenizers (ByteLevel, Split, Metaspace, Digits,
// Whitespace, Sequence) and decoders (ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, Sequence),
// with the semantics of the `tokenizers` library.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace inflight::engine {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // `text` is valid UTF-8 and stays so.
  virtual void normalize(std::string& text) const = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits each piece further (or rewrites it). `first_segment`: the pieces come from the start of the
  // text (before any added token), which Metaspace's prepend_scheme "first" needs.
  virtual void split(std::vector<std::string>& pieces, bool first_segment) const = 0;
};

// Decoders work on raw bytes per token; the tokenizer repairs invalid UTF-8 once at the end.
struct DecodeState {
  // The tokens continue text decoded before (streaming): rules for the start of the text
  // (Metaspace's leading space, Strip of the fused text's start) do not apply.
  bool continuation = false;
  bool fused = false;  // a Fuse ran: token 0 is all the text
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode(std::vector<std::string>& tokens, DecodeState& state) const = 0;
};

// nullptr for a JSON null. Throw std::invalid_argument naming the unsupported type or the bad field.
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j);
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j);
std::unique_ptr<Decoder> make_decoder(const nlohmann::json& j);

// The pre-tokenizer regexes of well-known byte-level BPE vocabularies (GGUF tokenizer.ggml.pre).
extern const char* const kGpt2SplitPattern;   // GPT-2, also ByteLevel's use_regex
extern const char* const kLlama3SplitPattern; // Llama 3 ("llama-bpe")
extern const char* const kQwen2SplitPattern;  // Qwen 2 / 3

}  // namespace inflight::engine

// Sentencepiece vocabularies: a tokenizer.model file, or the vocabulary a GGUF file carries with
// tokenizer.ggml.model = "llama" (rebuilt as a sentencepiece ModelProto).
#pragma once
#include <memory>
#include <string>

#include "engine/tokenizer_backend.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace inflight::engine {

struct Vocab;

class SentencePieceTokenizer final : public TokenizerBackend {
 public:
  // Both throw LoadError naming `path` / `where`.
  static std::unique_ptr<SentencePieceTokenizer> from_file(const std::string& path);
  static std::unique_ptr<SentencePieceTokenizer> from_vocab(const Vocab& vocab, const std::string& where);
  ~SentencePieceTokenizer() override;

  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids, bool continuation) const override;
  bool past_leading_space(std::span<const int32_t> ids) const override;
  std::string piece(int32_t id) const override;
  std::string token_bytes(int32_t id) const override;
  int vocab_size() const override;
  int32_t bos_id() const;
  int32_t eos_id() const;

 private:
  explicit SentencePieceTokenizer(std::unique_ptr<sentencepiece::SentencePieceProcessor> sp);
  std::string plain_decode(std::span<const int32_t> ids) const;

  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  // sentencepiece drops the leading space of the first piece of a decode, which is wrong mid-stream: a
  // continuation decodes [anchor] + ids and cuts anchor_text_ off. The anchor is a normal piece "▁x..."
  // (-1 if the vocabulary has none); anchor_literal_ is its text with the space kept.
  int32_t anchor_id_ = -1;
  std::string anchor_text_, anchor_literal_;
};

}  // namespace inflight::engine

// Tokenizer: sentencepiece, loaded from a tokenizer.model file or built from the vocabulary a GGUF file
// carries (tokenizer.ggml.*), so that a lone .gguf is enough.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace inflight::engine {

// The vocabulary as GGUF stores it (llama.cpp's tokenizer.ggml.* keys).
struct Vocab {
  std::string model = "llama";      // tokenizer.ggml.model; only "llama" (sentencepiece) is supported
  std::vector<std::string> tokens;  // tokenizer.ggml.tokens, pieces with U+2581 for spaces
  std::vector<float> scores;        // tokenizer.ggml.scores (may be empty: all 0)
  std::vector<int32_t> types;       // tokenizer.ggml.token_type: 1 normal, 2 unknown, 3 control,
                                    // 4 user-defined, 5 unused, 6 byte (may be empty: inferred)
  int32_t unk_id = 0, bos_id = 1, eos_id = 2, pad_id = -1;
  bool add_bos = true;              // tokenizer.ggml.add_bos_token
  bool add_space_prefix = true;     // tokenizer.ggml.add_space_prefix
};

class Tokenizer {
 public:
  // `where` names the source in error messages. Both throw LoadError.
  static Tokenizer from_file(const std::string& path);
  static Tokenizer from_vocab(const Vocab& vocab, const std::string& where);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Token ids of `text`, with BOS first when add_bos.
  std::vector<int32_t> encode(std::string_view text, bool add_bos) const;
  // Text of `ids`; control tokens (BOS/EOS) give no text; byte tokens join into UTF-8.
  std::string decode(std::span<const int32_t> ids) const;
  // The raw piece of one id (e.g. "▁Once", "<0x0A>").
  std::string piece(int32_t id) const;

  int vocab_size() const;
  int32_t bos_id() const { return bos_id_; }
  int32_t eos_id() const { return eos_id_; }
  bool add_bos() const { return add_bos_; }

 private:
  friend class IncrementalDetokenizer;
  explicit Tokenizer(std::unique_ptr<sentencepiece::SentencePieceProcessor> sp);
  // decode() of ids that follow text already decoded: sentencepiece drops the leading space of the first
  // piece of a decode, which is wrong mid-stream. Decodes [anchor] + ids and cuts anchor_text_ off.
  std::string decode_continuation(std::span<const int32_t> ids) const;
  // True when a piece appended to `ids` would keep its leading space, i.e. decode(ids + rest) ==
  // decode(ids) + decode_continuation(rest) for every rest (that does not continue a byte run).
  bool past_leading_space(std::span<const int32_t> ids) const;

  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  int32_t bos_id_ = 1, eos_id_ = 2;
  bool add_bos_ = true;
  // A normal piece "▁x..." (-1 if the vocabulary has none); anchor_text_ is decode([anchor_id_]) and
  // anchor_literal_ its text with the space kept.
  int32_t anchor_id_ = -1;
  std::string anchor_text_, anchor_literal_;
};

// Turns a growing token sequence into text deltas. A multi-byte UTF-8 character split over several
// tokens is emitted once, whole, when its last byte arrives; the text of all deltas concatenated equals
// decode(prompt + generated) minus decode(prompt).
class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer(const Tokenizer& tokenizer, std::span<const int32_t> prompt_ids);
  // Appends one generated token; returns the text that is now complete (may be empty).
  std::string push(int32_t id);
  // Text still held back at the end of generation (an incomplete UTF-8 tail), decoded as-is.
  std::string flush();

 private:
  const Tokenizer* tokenizer_;
  std::vector<int32_t> ids_;
  size_t prefix_offset_ = 0;  // ids_[prefix_offset_, read_offset_) give the context for the next delta
  size_t read_offset_ = 0;    // ids_ up to here have been turned into emitted text
  // Whether decode(ids_[0, prefix_offset_)) is past sentencepiece's leading-space strip, so that windows
  // decode as continuations; monotonic, since prefix_offset_ only grows.
  bool continuation_ = false;
  std::string window_text(size_t begin, size_t end) const;
};

}  // namespace inflight::engine

// Tokenizer: one interface over every vocabulary kind inflight reads (the backends, tokenizer_backend.h):
// - sentencepiece, from a tokenizer.model file or a GGUF vocabulary with tokenizer.ggml.model = "llama";
// - BPE with merges, from a Hugging Face tokenizer.json (+ tokenizer_config.json) or a GGUF vocabulary
//   with tokenizer.ggml.model = "gpt2" (tokenizer_bpe.h).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace inflight::engine {

class TokenizerBackend;

// The vocabulary as GGUF stores it (llama.cpp's tokenizer.ggml.* keys).
struct Vocab {
  std::string model = "llama";      // tokenizer.ggml.model: "llama" (sentencepiece) or "gpt2" (BPE)
  std::vector<std::string> tokens;  // tokenizer.ggml.tokens: pieces with U+2581 for spaces (llama) or
                                    // byte-level pieces (gpt2)
  std::vector<float> scores;        // tokenizer.ggml.scores (may be empty: all 0)
  std::vector<int32_t> types;       // tokenizer.ggml.token_type: 1 normal, 2 unknown, 3 control,
                                    // 4 user-defined, 5 unused, 6 byte (may be empty: inferred)
  std::vector<std::string> merges;  // tokenizer.ggml.merges, "a b" (gpt2)
  std::string pre;                  // tokenizer.ggml.pre (gpt2): "llama-bpe", "qwen2", "gpt-2", "smollm"
  int32_t unk_id = 0, bos_id = 1, eos_id = 2, pad_id = -1;
  bool add_bos = true;              // tokenizer.ggml.add_bos_token
  bool add_eos = false;             // tokenizer.ggml.add_eos_token (gpt2)
  bool add_space_prefix = true;     // tokenizer.ggml.add_space_prefix (llama)
};

class Tokenizer {
 public:
  // All throw LoadError naming the file (or `where`) and the problem.
  static Tokenizer from_file(const std::string& path);  // a sentencepiece tokenizer.model
  static Tokenizer from_vocab(const Vocab& vocab, const std::string& where);
  // A Hugging Face tokenizer.json; `config_path` (tokenizer_config.json, may be "" or absent) gives
  // add_bos_token / add_eos_token and the BOS / EOS tokens.
  static Tokenizer from_tokenizer_json(const std::string& path, const std::string& config_path);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Token ids of `text`; with add_special, the tokens the vocabulary adds around a text (BOS, and EOS
  // where configured). Added / special tokens written in the text (e.g. "<|im_start|>") are their ids with
  // a tokenizer.json or gpt2 vocabulary (as Hugging Face tokenizers do); sentencepiece encodes them as text.
  std::vector<int32_t> encode(std::string_view text, bool add_special) const;
  // Text of `ids`; control / special tokens (BOS, EOS, ...) give no text; byte tokens join into UTF-8
  // (an incomplete character becomes U+FFFD). Throws std::invalid_argument for an id outside the vocabulary.
  std::string decode(std::span<const int32_t> ids) const;
  // The raw vocabulary entry of one id (e.g. "▁Once", "<0x0A>", "Ġthe").
  std::string piece(int32_t id) const;
  // The bytes one token stands for in text (" Once", "\n", " the"); may be part of a UTF-8 character.
  std::string token_bytes(int32_t id) const;

  int vocab_size() const;
  int32_t bos_id() const { return bos_id_; }
  int32_t eos_id() const { return eos_id_; }
  // Whether prompts get BOS (tokenizer.ggml.add_bos_token, add_bos_token, the post_processor's template);
  // callers pass it as encode's add_special, which then also appends the EOS of a tokenizer that adds one.
  bool add_bos() const { return add_special_; }
  // "sentencepiece" or "bpe".
  const char* kind() const { return kind_; }
  // The BPE backend, for make-model's GGUF export; nullptr for sentencepiece.
  const class BpeTokenizer* bpe() const;
  // A model whose embedding has more rows than the vocabulary (padded, as Qwen's): with a BPE vocabulary,
  // the extra ids become valid and decode to nothing, so a sampled padding id cannot fail a stream.
  void pad_vocab(int model_vocab_size);

 private:
  friend class IncrementalDetokenizer;
  Tokenizer() = default;
  void check_ids(std::span<const int32_t> ids) const;
  // decode() of ids that follow text already decoded (no start-of-text rules such as a dropped leading space).
  std::string decode_continuation(std::span<const int32_t> ids) const;
  bool past_leading_space(std::span<const int32_t> ids) const;

  std::unique_ptr<TokenizerBackend> backend_;
  const char* kind_ = "sentencepiece";
  int32_t bos_id_ = 1, eos_id_ = 2;
  bool add_special_ = true;
  std::vector<int32_t> prefix_ids_, suffix_ids_;  // encode(text, true) = prefix + ids + suffix
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
  // Whether decode(ids_[0, prefix_offset_)) is past the start-of-text rules (sentencepiece's leading-space
  // strip), so that windows decode as continuations; monotonic, since prefix_offset_ only grows.
  bool continuation_ = false;
  std::string window_text(size_t begin, size_t end) const;
};

}  // namespace inflight::engine

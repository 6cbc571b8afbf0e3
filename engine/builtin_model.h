// Random-weight Llama-family models (Llama, Mistral, Qwen 2, Qwen 3), created deterministically: the shapes of
// `inflight make-model`. Each comes with a synthetic sentencepiece vocabulary
// (byte-fallback tokens + generated pieces) embedded in the GGUF, so the file stands alone.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/weight_types.h"
#include "kernels/dtype.h"

namespace inflight::engine {

struct ModelShape {
  std::string name;
  int dim = 0;
  int num_layers = 0;
  int num_q_heads = 0;
  int num_kv_heads = 0;
  int ffn_dim = 0;
  int vocab_size = 0;
  int max_seq_len = 0;
  // The architecture: "llama", "mistral" (GGUF: llama with a sliding window), "qwen2" (q/k/v bias),
  // "qwen3" (per-head q/k RMSNorm). GGUF llama/mistral q/k rows are in adjacent-pair RoPE order, qwen in
  // rotate-half order, as llama.cpp's converter writes them.
  std::string architecture = "llama";
  int head_dim = 0;              // 0: dim / num_q_heads
  float rms_eps = 1e-5f;
  double rope_theta = 10000.0;
  std::string rope_scaling;      // "" (none), "linear", "yarn", "llama3"
  float rope_factor = 1.0f;
  int rope_original_context = 0; // yarn, llama3
  float rope_low_freq_factor = 1.0f, rope_high_freq_factor = 4.0f;  // llama3
  int sliding_window = 0;        // mistral: > 0
  bool tied = false;             // no output.weight / lm_head: the embedding is the output projection

  int head_size() const { return head_dim > 0 ? head_dim : dim / num_q_heads; }
  bool qkv_bias() const { return architecture == "qwen2"; }
  bool qk_norm() const { return architecture == "qwen3"; }
};

// Presets: "tiny" (make-model's default), "smollm-135m", "tinyllama-1.1b", "qwen2.5-0.5b", "qwen3-0.6b",
// "llama3.2-1b" (the real dimensions), and the small test shapes "llama3-small" (llama3 rope scaling),
// "qwen2-small", "qwen3-small" (head_dim != dim / heads, yarn), "mistral-small" (sliding window 8, linear
// rope scaling): dims multiples of 256, 2 layers.
const std::vector<ModelShape>& model_presets();
// nullptr when no preset has that name.
const ModelShape* find_preset(const std::string& name);

class Tokenizer;

// A real vocabulary for a random model (make-model --tokenizer): the tokenizer (a tokenizer.json BPE one for
// GGUF) and its chat template ("" for none).
struct RealVocab {
  const Tokenizer* tokenizer = nullptr;
  std::string chat_template;
};

// Writes a GGUF file of `shape` with weights of `dtype` (one type, or a K-quant mix: weight_types.h), seeded
// by `seed`, streaming one tensor at a time. Norm weights are F32 ones; q/k norm weights (qwen3) F32 around 1,
// q/k/v biases (qwen2) F32 with std 0.5; Llama 3 rope scaling adds rope_freqs.weight, as llama.cpp's
// converter. Element i of a tensor depends only on (seed, tensor name, i), so the dtypes of one seed hold the
// same values up to rounding. Matrices are uniform with std 1/sqrt(in features), the embedding with std 1
// (1/sqrt(dim) when tied), so activations stay O(1).
// Throws std::invalid_argument for an inconsistent shape (heads not dividing dim, vocab_size < 260, a
// block type whose block size does not divide a matrix's columns), std::runtime_error on I/O errors.
// With `vocab`, the file carries that vocabulary as tokenizer.ggml.model = "gpt2" (tokens, token types,
// merges, pre, BOS / EOS and whether they are added) and its chat template; only byte-level BPE tokenizers
// whose pre-tokenizer GGUF names (gpt-2, llama-bpe, qwen2, smollm) can be written (std::invalid_argument).
void write_random_model(const std::string& path, const ModelShape& shape, const WeightTypes& dtype, uint64_t seed,
                        const RealVocab* vocab = nullptr);
// The same, as bytes in memory.
std::vector<uint8_t> random_model_gguf(const ModelShape& shape, const WeightTypes& dtype, uint64_t seed);

// The same model as a Hugging Face folder: config.json (LlamaForCausalLM), generation_config.json,
// model.safetensors (F32, F16 or BF16 matrices, F32 norms; the values of the GGUF of the same seed, with
// q/k rows in the rotate-half order the HF layout uses), and the tokenizer files of `tokenizer_dir` copied
// (tokenizer.json, tokenizer_config.json, and chat_template.jinja, special_tokens_map.json where present).
// Throws std::invalid_argument for a bad shape or dtype, std::runtime_error on I/O errors.
void write_random_model_hf(const std::string& folder, const ModelShape& shape, kernels::DType dtype, uint64_t seed,
                           const Tokenizer& tokenizer, const std::string& tokenizer_dir);

// One tensor of a random model, in GGUF terms: name ("blk.0.attn_q.weight"), ne (fastest first), dtype, and
// the callback that writes its bytes.
struct RandomTensor {
  std::string name;
  std::vector<int64_t> ne;
  kernels::DType dtype;
  std::function<void(uint8_t* dst)> fill;
};
// Every tensor of the random model of `shape`, in file order (what the writers above and the Hugging Face
// export stream). Throws std::invalid_argument for an inconsistent shape.
void for_each_random_tensor(const ModelShape& shape, const WeightTypes& types, uint64_t seed,
                            const std::function<void(RandomTensor)>& add);

}  // namespace inflight::engine

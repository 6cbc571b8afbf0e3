// Random-weight Llama models, created deterministically: the benchmark shapes of `inflight make-model`. Each comes with a synthetic sentencepiece vocabulary
// (byte-fallback tokens + generated pieces) embedded in the GGUF, so the file stands alone.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

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
};

// Presets: "tiny" (make-model's default), "smollm-135m", "tinyllama-1.1b".
const std::vector<ModelShape>& model_presets();
// nullptr when no preset has that name.
const ModelShape* find_preset(const std::string& name);

// Writes a GGUF file of `shape` with weights of `dtype` (F32, F16, BF16 or Q8_0), seeded by `seed`,
// streaming one tensor at a time. Norm weights are F32 ones. Element i of a tensor depends only on
// (seed, tensor name, i), so the dtypes of one seed hold the same values up to rounding. Matrices are
// uniform with std 1/sqrt(in features), the embedding with std 1, so activations stay O(1).
// Throws std::invalid_argument for an inconsistent shape (heads not dividing dim, vocab_size < 260,
// Q8_0 with dim or ffn_dim not a multiple of 32), std::runtime_error on I/O errors.
void write_random_model(const std::string& path, const ModelShape& shape, kernels::DType dtype, uint64_t seed);
// The same, as bytes in memory.
std::vector<uint8_t> random_model_gguf(const ModelShape& shape, kernels::DType dtype, uint64_t seed);

}  // namespace inflight::engine

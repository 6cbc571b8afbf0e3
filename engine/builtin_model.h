// Random-weight Llama models, created deterministically: the built-in default model and the
// benchmark shapes of `inflight make-model`. Each comes with a synthetic sentencepiece vocabulary
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

// Presets: "tiny" (the built-in default), "smollm-135m", "tinyllama-1.1b".
const std::vector<ModelShape>& model_presets();
// nullptr when no preset has that name.
const ModelShape* find_preset(const std::string& name);

// Writes a GGUF file of `shape` with weights of `dtype` (F32, F16, BF16 or Q8_0), seeded by `seed`.
void write_random_model(const std::string& path, const ModelShape& shape, kernels::DType dtype, uint64_t seed);
// The same, as bytes in memory (used for the built-in model).
std::vector<uint8_t> random_model_gguf(const ModelShape& shape, kernels::DType dtype, uint64_t seed);

}  // namespace inflight::engine

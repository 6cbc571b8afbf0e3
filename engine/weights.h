// ModelWeights: every tensor of a Llama-family decoder, as views into memory the object keeps alive
// (a model file read into memory, or a buffer). Filled by the GGUF and the safetensors loaders alike.
#pragma once
#include <memory>
#include <vector>

#include "engine/model_config.h"
#include "kernels/matmul.h"

namespace inflight::engine {

struct LayerWeights {
  std::vector<float> attn_norm;  // [dim]
  kernels::WeightMatrix wq;      // [num_q_heads * head_dim, dim]
  kernels::WeightMatrix wk;      // [num_kv_heads * head_dim, dim]
  kernels::WeightMatrix wv;      // [num_kv_heads * head_dim, dim]
  kernels::WeightMatrix wo;      // [dim, num_q_heads * head_dim]
  // Optional parts, empty when the architecture has none.
  std::vector<float> bq;         // [num_q_heads * head_dim] q bias (qkv_bias)
  std::vector<float> bk;         // [num_kv_heads * head_dim]
  std::vector<float> bv;         // [num_kv_heads * head_dim]
  std::vector<float> q_norm;     // [head_dim] per-head RMSNorm weight of q (qk_norm)
  std::vector<float> k_norm;     // [head_dim]
  std::vector<float> ffn_norm;   // [dim]
  kernels::WeightMatrix w_gate;  // [ffn_dim, dim]
  kernels::WeightMatrix w_up;    // [ffn_dim, dim]
  kernels::WeightMatrix w_down;  // [dim, ffn_dim]
};

struct ModelWeights {
  ModelConfig config;
  kernels::WeightMatrix token_embd;  // [vocab_size, dim]
  std::vector<LayerWeights> layers;  // [num_layers]
  std::vector<float> output_norm;    // [dim]
  kernels::WeightMatrix output;      // [vocab_size, dim]; == token_embd when tied
  // Owners of the memory the views point into (files read into memory, converted buffers).
  std::vector<std::shared_ptr<const void>> storage;
};

// Interleaves, once each, the matrices this CPU multiplies faster so (kernels::interleaving_pays: the
// integer types under AVX-512 VNNI, F16 / BF16 under AVX2 and AVX-512); a tied embedding follows the output
// matrix (rows read with kernels::matrix_row).
// in_place: rearranges the bytes where they are, which must be writable and viewed by nothing else yet (the
// GGUF loader, on its map_file() copy). Else into one new buffer on 2 MiB pages, the matrices one after another as a file's
// tensors lie (a buffer per matrix, each 2 MiB-aligned, measured 1.45x slower at decode), kept in
// w.storage; the file's memory stays, for other ModelWeights may view it. Model's constructor calls this,
// and finds nothing left to do after the GGUF loader.
void interleave_matrices(ModelWeights& w, bool in_place);

}  // namespace inflight::engine

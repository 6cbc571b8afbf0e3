// Element-wise and row-wise operations of a Llama-family layer. Rows are independent; each runs on
// the compute pool when there are many.
#pragma once
#include <cstdint>

namespace inflight::kernels {

// How a head's features are paired for the rotation.
enum class RopeStyle : uint8_t {
  GptJ,  // adjacent pairs (x[2i], x[2i+1]): GGUF / Meta / llama2.c layout
  NeoX,  // rotate-half pairs (x[i], x[i + rotary_dim/2]): Hugging Face layout
};

struct RopeParams {
  RopeStyle style = RopeStyle::GptJ;
  int head_dim = 0;
  int rotary_dim = 0;  // first rotary_dim features of each head rotate (partial rotary); <= head_dim, even
  float theta = 10000.0f;
};

// out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * weight. x, out: [num_tokens, dim] (may alias).
void rms_norm(const float* x, const float* weight, float* out, int64_t num_tokens, int64_t dim, float eps);

// Rotates `num_heads` heads of each token in place. x: [num_tokens, row_stride], heads at
// x[t * row_stride + h * head_dim]. positions: [num_tokens].
// Angle of pair i (0 <= i < rotary_dim/2): pos * theta^(-2i / rotary_dim).
void apply_rope(const RopeParams& rope, float* x, int64_t row_stride, int num_heads, const int32_t* positions,
                int64_t num_tokens);

// out[t, i] = silu(gate[t, i]) * up[t, i]. gate/up/out: [num_tokens, dim] (out may alias gate).
void silu_mul(const float* gate, const float* up, float* out, int64_t num_tokens, int64_t dim);

// x[i] += y[i] for i < n.
void add_inplace(float* x, const float* y, int64_t n);

// In-place softmax over x[0, n) with max subtraction.
void softmax(float* x, int64_t n);

}  // namespace inflight::kernels

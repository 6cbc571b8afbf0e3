// Element-wise and row-wise operations of a Llama-family layer. Rows are independent; each runs on
// the compute pool when there are many.
#pragma once
#include "kernels/host_device.h"
#include <cmath>
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

// The pieces of apply_rope, for kernels that rotate heads on their own (the fused KV append). One
// float order everywhere, so every caller gets the same bits.
// freq: [rotary_dim / 2] radians per position of pair i: theta^(-2i / rotary_dim).
inline void rope_frequencies(const RopeParams& rope, float* freq) {
  for (int i = 0; i < rope.rotary_dim / 2; ++i)
    freq[i] = 1.0f / std::pow(rope.theta, float(2 * i) / float(rope.rotary_dim));
}
// cos_sin: [rotary_dim / 2, 2] (cos, sin) of each pair's angle at position `pos`.
inline void rope_cos_sin(const RopeParams& rope, const float* freq, float pos, float* cos_sin) {
  for (int i = 0; i < rope.rotary_dim / 2; ++i) {
    const float angle = pos * freq[i];
    cos_sin[2 * i] = std::cos(angle);
    cos_sin[2 * i + 1] = std::sin(angle);
  }
}
// Rotates one head [head_dim] in place by a row of rope_cos_sin.
INFLIGHT_HD inline void rotate_head(const RopeParams& rope, const float* cos_sin, float* head) {
  const int num_pairs = rope.rotary_dim / 2;
  // pair i is (head[a], head[b]); GptJ: a = 2i, b = 2i + 1; NeoX: a = i, b = i + rotary_dim / 2
  const int step = rope.style == RopeStyle::GptJ ? 2 : 1;
  const int offset = rope.style == RopeStyle::GptJ ? 1 : num_pairs;
  for (int i = 0; i < num_pairs; ++i) {
    const float fcr = cos_sin[2 * i], fci = cos_sin[2 * i + 1];
    float* a = head + i * step;
    float* b = a + offset;
    const float v0 = *a, v1 = *b;
    *a = v0 * fcr - v1 * fci;
    *b = v0 * fci + v1 * fcr;
  }
}

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

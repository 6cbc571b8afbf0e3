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

// How RoPE's frequencies are stretched for a context longer than the one trained (llama.cpp's
// ggml_rope_ext): Linear divides every frequency by `factor`; Yarn (NTK-by-parts) divides only the
// low frequencies, ramping between the corrected dims of beta_fast and beta_slow rotations over
// original_context, and scales cos/sin by attn_factor. Llama 3's scaling is per-pair freq_factors.
enum class RopeScaling : uint8_t { None, Linear, Yarn };

struct RopeParams {
  RopeStyle style = RopeStyle::GptJ;
  int head_dim = 0;
  int rotary_dim = 0;  // first rotary_dim features of each head rotate (partial rotary); <= head_dim, even
  float theta = 10000.0f;
  RopeScaling scaling = RopeScaling::None;
  float factor = 1.0f;           // Linear / Yarn: context stretch (freq_scale = 1 / factor)
  int original_context = 0;      // Yarn: trained context length the correction dims are measured on
  float beta_fast = 32.0f;       // Yarn: rotations at which interpolation starts (high-frequency end)
  float beta_slow = 1.0f;        // Yarn: rotations at which it is complete (low-frequency end)
  float attn_factor = 1.0f;      // multiplies cos and sin (Yarn: 1 + 0.1 ln(factor) unless given)
  // [rotary_dim / 2] divisors of each pair's frequency (Llama 3: GGUF rope_freqs.weight), host memory
  // kept alive by the owner of the params; nullptr: all 1.
  const float* freq_factors = nullptr;
};

// out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * weight. x, out: [num_tokens, dim] (may alias).
void rms_norm(const float* x, const float* weight, float* out, int64_t num_tokens, int64_t dim, float eps);
// The residual add and the next norm in one pass over the rows (vLLM's fused_add_rms_norm): x[t] += y[t], then
// out[t] = rms_norm(x[t]); the bits of add_inplace followed by rms_norm. out may alias y.
void add_rms_norm(float* x, const float* y, const float* weight, float* out, int64_t num_tokens, int64_t dim,
                  float eps);

// The pieces of apply_rope, for kernels that rotate heads on their own (the fused KV append). One
// float order everywhere, so every caller gets the same bits.
// freq: [rotary_dim / 2] radians per position of pair i: theta^(-2i / rotary_dim), divided by
// freq_factors[i], then stretched by the scaling (see RopeScaling).
void rope_frequencies(const RopeParams& rope, float* freq);
// cos_sin: [rotary_dim / 2, 2] (cos, sin) of each pair's angle at position `pos`, times attn_factor.
inline void rope_cos_sin(const RopeParams& rope, const float* freq, float pos, float* cos_sin) {
  for (int i = 0; i < rope.rotary_dim / 2; ++i) {
    const float angle = pos * freq[i];
    cos_sin[2 * i] = std::cos(angle);
    cos_sin[2 * i + 1] = std::sin(angle);
  }
  if (rope.attn_factor != 1.0f)
    for (int i = 0; i < rope.rotary_dim; ++i) cos_sin[i] *= rope.attn_factor;
}
// Llama 3's per-pair frequency divisors ([rotary_dim / 2], what llama.cpp stores as rope_freqs.weight):
// 1 for wavelengths under original_context / high_freq_factor, `factor` above original_context /
// low_freq_factor, a smooth blend between.
void llama3_rope_freq_factors(float theta, int rotary_dim, float factor, float low_freq_factor,
                              float high_freq_factor, int original_context, float* out);

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

// out[t, i] = silu(gate[t, i]) * up[t, i], with e^x as exp_approx. gate/up/out: [num_tokens, dim] (out may
// alias gate). The same bits on every ISA.
void silu_mul(const float* gate, const float* up, float* out, int64_t num_tokens, int64_t dim);
// e^x within 2 ulp of the exact value over [-87.3, 88]; 0 below, e^88 above.
float exp_approx(float x);

// x[t, i] += bias[i]. x: [num_tokens, dim].
void add_bias(float* x, const float* bias, int64_t num_tokens, int64_t dim);

// x[i] += y[i] for i < n.
void add_inplace(float* x, const float* y, int64_t n);

// The index std::max_element(x, x + n) gives (operator<): the first of the largest values, NaNs passed
// over unless x[0] is one (then 0). n >= 1. Vectorised per ISA: the greedy sampler's whole cost.
int64_t argmax(const float* x, int64_t n);

// In-place softmax over x[0, n) with max subtraction.
void softmax(float* x, int64_t n);

}  // namespace inflight::kernels

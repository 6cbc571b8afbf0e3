#include <algorithm>
#include <cmath>

#include "kernels/attention_params.h"

namespace inflight::kernels {

void append_kv(const PagedKvView& kv, const float* k, int64_t k_stride, const float* v, int64_t v_stride,
               const int64_t* slot_mapping, int64_t num_tokens) {
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int64_t slot = slot_mapping[t];
    if (slot < 0) continue;
    const int64_t block = slot / kv.block_size;
    const int in_block = int(slot % kv.block_size);
    for (int h = 0; h < kv.num_kv_heads; ++h) {
      kv_quantize_row(kv.dtype, k + t * k_stride + int64_t(h) * kv.head_dim, kv.head_dim,
                      kv.row(block, 0, h, in_block), kv.row_scales(block, 0, h, in_block));
      kv_quantize_row(kv.dtype, v + t * v_stride + int64_t(h) * kv.head_dim, kv.head_dim,
                      kv.row(block, 1, h, in_block), kv.row_scales(block, 1, h, in_block));
    }
  }
}

void kv_append_amax(const AttentionParams& p, float amax[2]) {
  amax[0] = amax[1] = 0.0f;
  if (p.k == nullptr) return;
  const int D = p.head_dim;
  const int rotary = p.rope_on() ? p.rope.rotary_dim : 0;
  const int pairs = rotary / 2;
  // A rotation keeps each pair's norm, so sqrt(a^2 + b^2) bounds both rotated values at any position.
  const int step = p.rope.style == RopeStyle::GptJ ? 2 : 1;
  const int offset = p.rope.style == RopeStyle::GptJ ? 1 : pairs;
  for (int64_t t = 0; t < p.num_tokens(); ++t) {
    for (int h = 0; h < p.num_kv_heads; ++h) {
      const float* kt = p.k + t * p.k_stride + int64_t(h) * D;
      const float* vt = p.v + t * p.v_stride + int64_t(h) * D;
      for (int d = 0; d < D; ++d) amax[1] = std::max(amax[1], std::fabs(vt[d]));
      for (int i = 0; i < pairs; ++i)
        amax[0] = std::max(amax[0], std::hypot(kt[i * step], kt[i * step + offset]));
      for (int d = rotary; d < D; ++d) amax[0] = std::max(amax[0], std::fabs(kt[d]));
    }
  }
}

}  // namespace inflight::kernels

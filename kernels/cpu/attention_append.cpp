// The fused KV append (MultiHeadCacheAttention's cache write): each new token's K is rotated (RoPE, the
// same formulas as kernels::apply_rope) in a small buffer and quantized straight into its slot; V is
// quantized into its slot. One pass over the step's K/V, no rotated copy of K in memory.
#include <algorithm>
#include <vector>

#include "kernels/cpu/attention_driver.h"
#include "kernels/cpu/isa.h"
#include "kernels/thread_pool.h"

namespace inflight::kernels::cpu {

void append_rows(const AttentionParams& p, const RopeTable& rope) {
  if (p.k == nullptr) return;
  const PagedKvView& kv = p.kv;
  const int64_t num_tokens = p.num_tokens();
  const int64_t grain = std::max<int64_t>(1, 4096 / std::max(1, kv.num_kv_heads * kv.head_dim));
  const bool f16c = kv.dtype == KvDType::F16 && active_isa() >= Isa::Avx2;  // the same bits, 8 at a time
  compute_pool().parallel_for(num_tokens, grain, [&](int64_t begin, int64_t end) {
    std::vector<float> krow(size_t(kv.head_dim));  // [head_dim] one rotated K head
    for (int64_t t = begin; t < end; ++t) {
      const int64_t slot = p.slot_mapping[t];
      if (slot < 0) continue;  // a padding token: nothing to store
      const int64_t block = slot / kv.block_size;
      const int in_block = int(slot % kv.block_size);
      for (int h = 0; h < kv.num_kv_heads; ++h) {
        const float* kt = p.k + t * p.k_stride + int64_t(h) * kv.head_dim;
        const float* vt = p.v + t * p.v_stride + int64_t(h) * kv.head_dim;
        std::copy(kt, kt + kv.head_dim, krow.begin());
        rope.rotate(t, krow.data());
        if (f16c) {
          f16_row_f16c(krow.data(), kv.head_dim, static_cast<uint16_t*>(kv.row(block, 0, h, in_block)));
          f16_row_f16c(vt, kv.head_dim, static_cast<uint16_t*>(kv.row(block, 1, h, in_block)));
          continue;
        }
        kv_quantize_row(kv.dtype, krow.data(), kv.head_dim, kv.row(block, 0, h, in_block),
                        kv.row_scales(block, 0, h, in_block));
        kv_quantize_row(kv.dtype, vt, kv.head_dim, kv.row(block, 1, h, in_block), kv.row_scales(block, 1, h, in_block));
      }
    }
  });
}

void append_kv(const AttentionParams& p) {
  if (p.k == nullptr) return;
  RopeTable rope;
  rope.build(p, 0, p.num_tokens());
  append_rows(p, rope);
}

}  // namespace inflight::kernels::cpu

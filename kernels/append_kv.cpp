#include "kernels/attention_params.h"

namespace inflight::kernels {

void append_kv(const PagedKvView& kv, const float* k, int64_t k_stride, const float* v, int64_t v_stride,
               const int64_t* slot_mapping, int64_t num_tokens) {
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int64_t slot = slot_mapping[t];
    const int64_t block = slot / kv.block_size;
    const int in_block = int(slot % kv.block_size);
    for (int h = 0; h < kv.num_kv_heads; ++h) {
      const float* kt = k + t * k_stride + int64_t(h) * kv.head_dim;
      const float* vt = v + t * v_stride + int64_t(h) * kv.head_dim;
      const int64_t k_off = kv.offset(block, 0, h, in_block);
      const int64_t v_off = kv.offset(block, 1, h, in_block);
      for (int d = 0; d < kv.head_dim; ++d) {
        kv_store(kv.dtype, kv.data, k_off + d, kt[d]);
        kv_store(kv.dtype, kv.data, v_off + d, vt[d]);
      }
    }
  }
}

}  // namespace inflight::kernels

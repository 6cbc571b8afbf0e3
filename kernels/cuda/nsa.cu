// NSA selected attention on the GPU (nsa.h).
#include "kernels/cuda/nsa.h"

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_common.cuh"

namespace inflight::kernels::cuda {

namespace {

constexpr int kMaxDim = 256;               // head_dim_qk, head_dim_v
constexpr int kPerLane = kMaxDim / 32;     // features a lane holds
constexpr int kWarps = 4;                  // query heads per block

// Query head n of token t: lane l holds features l + 32 i of q and of the output.
__global__ void nsa_kernel(NsaParams p, int64_t num_heads_total) {
  const int64_t item = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;  // t * num_q_heads + n
  if (item >= num_heads_total) return;
  const int lane = threadIdx.x % 32;
  const int64_t t = item / p.num_q_heads;
  const int n = int(item % p.num_q_heads), h = n / (p.num_q_heads / p.num_kv_heads);
  int b = 0;  // the sequence of token t
  while (b + 1 < p.batch && p.cu_seqlens_q[b + 1] <= t) ++b;
  const int64_t i = t - p.cu_seqlens_q[b];
  const int64_t kv0 = p.cu_seqlens_kv[b], kv_len = p.cu_seqlens_kv[b + 1] - kv0;
  const int eb = kv_elem_bytes(p.dtype);
  const auto* qrow = static_cast<const uint8_t*>(p.q) + item * p.head_dim_qk * eb;

  float q[kPerLane], o[kPerLane];
#pragma unroll
  for (int x = 0; x < kPerLane; ++x) {
    const int d = lane + 32 * x;
    q[x] = d < p.head_dim_qk ? kv_dequantize(p.dtype, qrow, d, {}) : 0.0f;
    o[x] = 0.0f;
  }
  float m = -INFINITY, sum = 0.0f;
  const int bs = p.selected_block_size, count = p.selected_block_count;
  for (int c = 0; c < count; ++c) {
    const int64_t blk = p.topk_indices[(t * p.num_kv_heads + h) * count + c];
    if (blk < 0 || blk * bs >= kv_len) continue;
    int64_t end = blk * bs + bs < kv_len ? blk * bs + bs : kv_len;
    if (p.sparse_mode == 2 && end > i + 1) end = i + 1;
    for (int64_t j = blk * bs; j < end; ++j) {
      const auto* krow = static_cast<const uint8_t*>(p.k) + ((kv0 + j) * p.num_kv_heads + h) * p.head_dim_qk * eb;
      const auto* vrow = static_cast<const uint8_t*>(p.v) + ((kv0 + j) * p.num_kv_heads + h) * p.head_dim_v * eb;
      float dot = 0.0f;
#pragma unroll
      for (int x = 0; x < kPerLane; ++x) {
        const int d = lane + 32 * x;
        if (d < p.head_dim_qk) dot = fmaf(q[x], kv_dequantize(p.dtype, krow, d, {}), dot);
      }
      const float s = detail::warp_sum(dot) * p.scale;
      if (s > m) {  // a new max: rescale what is summed so far (nothing, the first time)
        const float corr = m == -INFINITY ? 0.0f : expf(m - s);
        sum *= corr;
#pragma unroll
        for (int x = 0; x < kPerLane; ++x) o[x] *= corr;
        m = s;
      }
      const float w = expf(s - m);
      sum += w;
#pragma unroll
      for (int x = 0; x < kPerLane; ++x) {
        const int d = lane + 32 * x;
        if (d < p.head_dim_v) o[x] = fmaf(w, kv_dequantize(p.dtype, vrow, d, {}), o[x]);
      }
    }
  }
  auto* out = static_cast<uint8_t*>(p.out) + item * p.head_dim_v * eb;
#pragma unroll
  for (int x = 0; x < kPerLane; ++x) {
    const int d = lane + 32 * x;
    if (d >= p.head_dim_v) continue;
    const float value = sum > 0.0f ? o[x] / sum : 0.0f;  // a query that sees no key gets zeros
    kv_quantize_row(p.dtype, &value, 1, out + d * eb, {});
  }
  if (lane == 0) {
    p.softmax_max[item] = m;
    p.softmax_sum[item] = sum;
  }
}

}  // namespace

void nsa_selected_attention(const NsaParams& p, int64_t num_query_tokens, cudaStream_t stream) {
  check_nsa_params(p, __FILE__, __LINE__);
  if (p.head_dim_qk > kMaxDim) {
    std::fprintf(stderr, "%s:%d: cuda nsa_selected_attention: head_dim_qk must be <= %d\n", __FILE__, __LINE__,
                 kMaxDim);
    std::abort();
  }
  const int64_t items = num_query_tokens * p.num_q_heads;
  if (items == 0) return;
  nsa_kernel<<<unsigned((items + kWarps - 1) / kWarps), kWarps * 32, 0, stream>>>(p, items);
  INFLIGHT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace inflight::kernels::cuda

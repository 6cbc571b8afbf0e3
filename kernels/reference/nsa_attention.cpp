// Reference NSA selected attention: for each token and query head, gather, score, mask, softmax.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/nsa_params.h"
#include "kernels/thread_pool.h"

namespace inflight::kernels {

void check_nsa_params(const NsaParams& p, const char* file, int line) {
  const char* what = nullptr;
  if (p.num_kv_heads <= 0 || p.num_q_heads % p.num_kv_heads != 0) what = "num_q_heads must be a multiple of num_kv_heads";
  else if (p.num_q_heads / p.num_kv_heads > 32) what = "group G must be <= 32";
  else if (p.selected_block_size <= 0 || p.selected_block_size % 16 != 0 || p.selected_block_size > 128)
    what = "selected_block_size must be a multiple of 16, <= 128";
  else if (p.selected_block_count <= 0 || p.selected_block_count > 32) what = "selected_block_count must be in [1, 32]";
  else if (p.head_dim_v > p.head_dim_qk) what = "head_dim_v must be <= head_dim_qk";
  else if (p.sparse_mode != 0 && p.sparse_mode != 2) what = "sparse_mode must be 0 or 2";
  else if (p.dtype != KvDType::F32 && p.dtype != KvDType::F16 && p.dtype != KvDType::BF16)
    what = "NSA q / k / v / out must be f32, f16 or bf16";
  if (what == nullptr) return;
  std::fprintf(stderr, "%s:%d: nsa_selected_attention: %s\n", file, line, what);
  std::abort();
}

namespace reference {

void nsa_selected_attention(const NsaParams& p) {
  check_nsa_params(p, __FILE__, __LINE__);
  const int G = p.num_q_heads / p.num_kv_heads;
  const int bs = p.selected_block_size, count = p.selected_block_count;
  const int64_t k_stride = int64_t(p.num_kv_heads) * p.head_dim_qk, v_stride = int64_t(p.num_kv_heads) * p.head_dim_v;
  const int eb = kv_elem_bytes(p.dtype);
  const KvRowScales none;
  const int64_t num_tokens = p.cu_seqlens_q[p.batch];
  std::vector<int> seq_of(size_t(std::max<int64_t>(num_tokens, 0)));
  for (int b = 0; b < p.batch; ++b)
    for (int t = p.cu_seqlens_q[b]; t < p.cu_seqlens_q[b + 1]; ++t) seq_of[size_t(t)] = b;

  compute_pool().parallel_for(num_tokens * p.num_q_heads, 4, [&](int64_t begin, int64_t end) {
    std::vector<float> scores, q(size_t(p.head_dim_qk)), out(size_t(p.head_dim_v));
    std::vector<int64_t> keys;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t t = task / p.num_q_heads;
      const int n = int(task % p.num_q_heads), h = n / G;
      const int b = seq_of[size_t(t)];
      const int64_t i = t - p.cu_seqlens_q[b];  // query row within the sequence
      const int64_t kv0 = p.cu_seqlens_kv[b], kv_len = p.cu_seqlens_kv[b + 1] - kv0;
      keys.clear();  // gathered key positions within the sequence, in topk order
      for (int c = 0; c < count; ++c) {
        const int64_t blk = p.topk_indices[(t * p.num_kv_heads + h) * count + c];
        if (blk < 0 || blk * bs >= kv_len) continue;
        for (int64_t j = blk * bs; j < std::min<int64_t>((blk + 1) * bs, kv_len); ++j)
          if (p.sparse_mode != 2 || j <= i) keys.push_back(j);
      }
      kv_dequantize_row(p.dtype, static_cast<const uint8_t*>(p.q) + (t * p.num_q_heads + n) * p.head_dim_qk * eb,
                        p.head_dim_qk, q.data(), none);
      void* out_row = static_cast<uint8_t*>(p.out) + (t * p.num_q_heads + n) * p.head_dim_v * eb;
      std::fill(out.begin(), out.end(), 0.0f);
      if (keys.empty()) {
        kv_quantize_row(p.dtype, out.data(), p.head_dim_v, out_row, none);
        p.softmax_max[t * p.num_q_heads + n] = -INFINITY;
        p.softmax_sum[t * p.num_q_heads + n] = 0.0f;
        continue;
      }
      scores.resize(keys.size());
      float mx = -INFINITY;
      for (size_t x = 0; x < keys.size(); ++x) {
        const auto* k = static_cast<const uint8_t*>(p.k) + ((kv0 + keys[x]) * k_stride + int64_t(h) * p.head_dim_qk) * eb;
        float s = 0.0f;
        for (int d = 0; d < p.head_dim_qk; ++d) s += q[size_t(d)] * kv_dequantize(p.dtype, k, d, none);
        scores[x] = s * p.scale;
        mx = std::max(mx, scores[x]);
      }
      float sum = 0.0f;
      for (float& s : scores) sum += (s = std::exp(s - mx));
      for (size_t x = 0; x < keys.size(); ++x) {
        const auto* v = static_cast<const uint8_t*>(p.v) + ((kv0 + keys[x]) * v_stride + int64_t(h) * p.head_dim_v) * eb;
        const float a = scores[x] / sum;
        for (int d = 0; d < p.head_dim_v; ++d) out[size_t(d)] += a * kv_dequantize(p.dtype, v, d, none);
      }
      kv_quantize_row(p.dtype, out.data(), p.head_dim_v, out_row, none);
      p.softmax_max[t * p.num_q_heads + n] = mx;
      p.softmax_sum[t * p.num_q_heads + n] = sum;
    }
  });
}

}  // namespace reference
}  // namespace inflight::kernels

// NSA selected attention test cases (kernels/nsa_params.h), shared by the CPU and CUDA tests: random TND q, k,
// v stored in a dtype, top-k block lists, and the comparisons with the reference.
#pragma once
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/kv_dtype.h"
#include "kernels/nsa_params.h"

namespace inflight::test {

using kernels::KvDType;

struct NsaCase {
  KvDType dtype = KvDType::F32;
  std::vector<int32_t> cu_q{0}, cu_kv{0};
  std::vector<float> q, k32, v32;      // TND, f32 (the values the dtype holds)
  std::vector<uint8_t> qs, ks, vs;     // q, k, v stored in dtype
  std::vector<int32_t> topk;
  std::vector<uint8_t> out_store;      // out in dtype
  std::vector<float> mx, sum;
  kernels::NsaParams p;

  std::vector<float> out() const {
    std::vector<float> o(out_store.size() / size_t(kernels::kv_elem_bytes(dtype)));
    kernels::kv_dequantize_row(dtype, out_store.data(), int(o.size()), o.data(), {});
    return o;
  }
  // Points p at this case's own buffers (after a copy).
  void bind() {
    p.q = qs.data();
    p.k = ks.data();
    p.v = vs.data();
    p.topk_indices = topk.data();
    p.cu_seqlens_q = cu_q.data();
    p.cu_seqlens_kv = cu_kv.data();
    p.out = out_store.data();
    p.softmax_max = mx.data();
    p.softmax_sum = sum.data();
  }
};

// q_lens / kv_lens per sequence; topk distinct blocks (plus a -1 and a duplicate when `odd`).
inline NsaCase make_nsa_case(const std::vector<int>& q_lens, const std::vector<int>& kv_lens, int nq, int nkv,
                             int dqk, int dv, int bs, int count, int mode, KvDType dtype, uint32_t seed, bool odd) {
  NsaCase c;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  for (size_t b = 0; b < q_lens.size(); ++b) {
    c.cu_q.push_back(c.cu_q.back() + q_lens[b]);
    c.cu_kv.push_back(c.cu_kv.back() + kv_lens[b]);
  }
  const int T = c.cu_q.back(), Tkv = c.cu_kv.back();
  c.q.resize(size_t(T) * nq * dqk);
  c.k32.resize(size_t(Tkv) * nkv * dqk);
  c.v32.resize(size_t(Tkv) * nkv * dv);
  for (float& x : c.q) x = normal(rng);
  for (float& x : c.k32) x = normal(rng);
  for (float& x : c.v32) x = normal(rng);
  c.dtype = dtype;
  const size_t eb = size_t(kernels::kv_elem_bytes(dtype));
  auto store = [&](std::vector<float>& x, std::vector<uint8_t>& bytes) {  // x becomes what the dtype holds
    bytes.resize(x.size() * eb);
    kernels::kv_quantize_row(dtype, x.data(), int(x.size()), bytes.data(), {});
    kernels::kv_dequantize_row(dtype, bytes.data(), int(x.size()), x.data(), {});
  };
  store(c.q, c.qs);
  store(c.k32, c.ks);
  store(c.v32, c.vs);
  for (size_t b = 0; b < q_lens.size(); ++b) {
    const int num_blocks = kv_lens[b] / bs;
    for (int t = 0; t < q_lens[b]; ++t)
      for (int h = 0; h < nkv; ++h) {
        std::vector<int32_t> blocks(static_cast<size_t>(num_blocks));
        std::iota(blocks.begin(), blocks.end(), 0);
        std::shuffle(blocks.begin(), blocks.end(), rng);
        blocks.resize(size_t(count));
        if (odd) {
          blocks[0] = -1;
          blocks[1] = blocks[2];
        }
        c.topk.insert(c.topk.end(), blocks.begin(), blocks.end());
      }
  }
  c.out_store.assign(size_t(T) * nq * dv * eb, 0xff);  // NaN in every dtype
  c.mx.assign(size_t(T) * nq, NAN);
  c.sum.assign(size_t(T) * nq, NAN);
  kernels::NsaParams& p = c.p;
  p.dtype = dtype;
  p.batch = int(q_lens.size());
  p.num_q_heads = nq;
  p.num_kv_heads = nkv;
  p.head_dim_qk = dqk;
  p.head_dim_v = dv;
  p.selected_block_size = bs;
  p.selected_block_count = count;
  p.scale = 1.0f / std::sqrt(float(dqk));
  p.sparse_mode = mode;
  c.bind();
  return c;
}

inline double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isinf(a[i]) && a[i] == b[i]) continue;
    const double d = std::fabs(double(a[i]) - b[i]);
    if (!(d <= m)) m = d;
  }
  return m;
}

// The largest |a - b| - (abs_tol + rel_step * max(|a|, |b|)); <= 0 when every pair is within tolerance.
inline double max_excess(const std::vector<float>& a, const std::vector<float>& b, double abs_tol, double rel_step) {
  double m = -1.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double tol = abs_tol + rel_step * std::max(std::fabs(double(a[i])), std::fabs(double(b[i])));
    const double e = std::fabs(double(a[i]) - b[i]) - tol;
    if (!(e <= m)) m = e;  // NaN counts as a failure
  }
  return m;
}

}  // namespace inflight::test

// NSA selected attention (kernels/nsa_params.h): the reference against a dense double-precision
// formulation, and the CPU kernel against the reference over D 192/128, G up to 32, block sizes
// 16..128, counts up to 32, sparse modes 0 and 2, f32/f16/bf16 q/k/v/out, every ISA.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "attention_test_support.h"
#include "kernels/nsa_params.h"

using namespace inflight;
using kernels::KvDType;

namespace {

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
NsaCase make_case(const std::vector<int>& q_lens, const std::vector<int>& kv_lens, int nq, int nkv, int dqk, int dv,
                  int bs, int count, int mode, KvDType dtype, uint32_t seed, bool odd) {
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

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isinf(a[i]) && a[i] == b[i]) continue;
    const double d = std::fabs(double(a[i]) - b[i]);
    if (!(d <= m)) m = d;
  }
  return m;
}

// The largest |a - b| - (abs_tol + rel_step * max(|a|, |b|)); <= 0 when every pair is within tolerance.
double max_excess(const std::vector<float>& a, const std::vector<float>& b, double abs_tol, double rel_step) {
  double m = -1.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double tol = abs_tol + rel_step * std::max(std::fabs(double(a[i])), std::fabs(double(b[i])));
    const double e = std::fabs(double(a[i]) - b[i]) - tol;
    if (!(e <= m)) m = e;  // NaN counts as a failure
  }
  return m;
}

}  // namespace

TEST_SUITE("nsa_attention") {
  TEST_CASE("reference matches a dense double-precision softmax over the selected keys") {
    for (int mode : {0, 2}) {
      NsaCase c = make_case({5, 3}, {64, 48}, 4, 2, 32, 16, 16, 2, mode, KvDType::F32, 2, false);
      kernels::reference::nsa_selected_attention(c.p);
      const kernels::NsaParams& p = c.p;
      const std::vector<float> out = c.out();
      double worst = 0.0;
      for (int b = 0; b < 2; ++b)
        for (int t = c.cu_q[size_t(b)]; t < c.cu_q[size_t(b) + 1]; ++t)
          for (int n = 0; n < 4; ++n) {
            const int h = n / 2, i = t - c.cu_q[size_t(b)];
            std::vector<double> s;
            std::vector<int> keys;
            for (int x = 0; x < 2; ++x)
              for (int j = 0; j < 16; ++j) {
                const int key = c.topk[size_t((t * 2 + h) * 2 + x)] * 16 + j;
                if (mode == 2 && key > i) continue;
                double dot = 0.0;
                for (int d = 0; d < 32; ++d)
                  dot += double(c.q[size_t((t * 4 + n) * 32 + d)]) * c.k32[size_t(((c.cu_kv[size_t(b)] + key) * 2 + h) * 32 + d)];
                s.push_back(dot * p.scale);
                keys.push_back(key);
              }
            if (s.empty()) {
              CHECK(c.mx[size_t(t * 4 + n)] == -INFINITY);
              continue;
            }
            const double m = *std::max_element(s.begin(), s.end());
            double z = 0.0;
            for (double x : s) z += std::exp(x - m);
            worst = std::max(worst, std::fabs(m - c.mx[size_t(t * 4 + n)]) + std::fabs(z - c.sum[size_t(t * 4 + n)]) / z);
            for (int d = 0; d < 16; ++d) {
              double o = 0.0;
              for (size_t x = 0; x < keys.size(); ++x)
                o += std::exp(s[x] - m) / z * c.v32[size_t(((c.cu_kv[size_t(b)] + keys[x]) * 2 + h) * 16 + d)];
              worst = std::max(worst, std::fabs(o - out[size_t((t * 4 + n) * 16 + d)]));
            }
          }
      CAPTURE(mode);
      CHECK(worst < 1e-5);
    }
  }

  TEST_CASE("CPU kernel == reference: D 192/128, G 1..32, block 16..128, count up to 32, modes 0/2, dtypes, ISAs") {
    test::IsaGuard guard;
    struct Shape {
      int nq, nkv, bs, count;
    };
    const Shape shapes[] = {{2, 2, 16, 4}, {16, 2, 64, 3}, {32, 1, 128, 2}, {8, 1, 16, 32}};
    for (kernels::cpu::Isa isa : test::supported_isas()) {
      kernels::cpu::set_active_isa(isa);
      for (const Shape& s : shapes)
        for (int mode : {0, 2})
          for (KvDType dtype : {KvDType::F32, KvDType::BF16, KvDType::F16}) {
            if (dtype != KvDType::F32 && isa != test::supported_isas().back()) continue;
            CAPTURE(kernels::cpu::isa_name(isa));
            CAPTURE(s.nq);
            CAPTURE(s.bs);
            CAPTURE(s.count);
            CAPTURE(mode);
            CAPTURE(kernels::kv_dtype_name(dtype));
            const int kv_len = std::max(s.bs * s.count, 512);
            NsaCase ref = make_case({6, 3}, {kv_len, kv_len}, s.nq, s.nkv, 192, 128, s.bs, s.count, mode, dtype, 17,
                                    s.count >= 3);
            NsaCase fast = ref;
            fast.bind();
            kernels::reference::nsa_selected_attention(ref.p);
            kernels::cpu::nsa_selected_attention(fast.p);
            // Outputs agree in float to 2e-5 before the one rounding to the dtype, so within one of its
            // steps after: relative 2^-7 for bf16, 2^-10 for f16.
            const double step = dtype == KvDType::F32 ? 0.0 : dtype == KvDType::BF16 ? 0x1p-7 : 0x1p-10;
            CHECK(max_excess(fast.out(), ref.out(), 2e-5, step) <= 0.0);
            CHECK(max_diff(fast.mx, ref.mx) < 2e-5);
            CHECK(max_diff(fast.sum, ref.sum) < 1e-4);
          }
    }
  }
}

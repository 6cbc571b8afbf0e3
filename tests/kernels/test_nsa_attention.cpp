// NSA selected attention (kernels/nsa_params.h): the reference against a dense double-precision
// formulation, and the CPU kernel against the reference over D 192/128, G up to 32, block sizes
// 16..128, counts up to 32, sparse modes 0 and 2, f32/f16/bf16 K/V, every ISA.
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
  std::vector<int32_t> cu_q{0}, cu_kv{0};
  std::vector<float> q, k32, v32;      // TND, f32
  std::vector<uint16_t> k16, v16;      // f16 / bf16 copies
  std::vector<int32_t> topk;
  std::vector<float> out, mx, sum;
  kernels::NsaParams p;
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
  auto round_to = [&](std::vector<float>& x, std::vector<uint16_t>& h) {
    for (float& f : x) {
      h.push_back(dtype == KvDType::F16 ? kernels::f32_to_f16(f) : kernels::f32_to_bf16(f));
      f = dtype == KvDType::F16 ? kernels::f16_to_f32(h.back()) : kernels::bf16_to_f32(h.back());
    }
  };
  if (dtype != KvDType::F32) {
    round_to(c.k32, c.k16);
    round_to(c.v32, c.v16);
  }
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
  c.out.assign(size_t(T) * nq * dv, NAN);
  c.mx.assign(size_t(T) * nq, NAN);
  c.sum.assign(size_t(T) * nq, NAN);
  kernels::NsaParams& p = c.p;
  p.q = c.q.data();
  p.k = dtype == KvDType::F32 ? static_cast<const void*>(c.k32.data()) : c.k16.data();
  p.v = dtype == KvDType::F32 ? static_cast<const void*>(c.v32.data()) : c.v16.data();
  p.kv_dtype = dtype;
  p.topk_indices = c.topk.data();
  p.cu_seqlens_q = c.cu_q.data();
  p.cu_seqlens_kv = c.cu_kv.data();
  p.batch = int(q_lens.size());
  p.num_q_heads = nq;
  p.num_kv_heads = nkv;
  p.head_dim_qk = dqk;
  p.head_dim_v = dv;
  p.selected_block_size = bs;
  p.selected_block_count = count;
  p.scale = 1.0f / std::sqrt(float(dqk));
  p.sparse_mode = mode;
  p.out = c.out.data();
  p.softmax_max = c.mx.data();
  p.softmax_sum = c.sum.data();
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

}  // namespace

TEST_SUITE("nsa_attention") {
  TEST_CASE("reference matches a dense double-precision softmax over the selected keys") {
    for (int mode : {0, 2}) {
      NsaCase c = make_case({5, 3}, {64, 48}, 4, 2, 32, 16, 16, 2, mode, KvDType::F32, 2, false);
      kernels::reference::nsa_selected_attention(c.p);
      const kernels::NsaParams& p = c.p;
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
              worst = std::max(worst, std::fabs(o - c.out[size_t((t * 4 + n) * 16 + d)]));
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
            fast.p.q = fast.q.data();
            fast.p.k = dtype == KvDType::F32 ? static_cast<const void*>(fast.k32.data()) : fast.k16.data();
            fast.p.v = dtype == KvDType::F32 ? static_cast<const void*>(fast.v32.data()) : fast.v16.data();
            fast.p.topk_indices = fast.topk.data();
            fast.p.cu_seqlens_q = fast.cu_q.data();
            fast.p.cu_seqlens_kv = fast.cu_kv.data();
            fast.p.out = fast.out.data();
            fast.p.softmax_max = fast.mx.data();
            fast.p.softmax_sum = fast.sum.data();
            kernels::reference::nsa_selected_attention(ref.p);
            kernels::cpu::nsa_selected_attention(fast.p);
            CHECK(max_diff(fast.out, ref.out) < 2e-5);
            CHECK(max_diff(fast.mx, ref.mx) < 2e-5);
            CHECK(max_diff(fast.sum, ref.sum) < 1e-4);
          }
    }
  }
}

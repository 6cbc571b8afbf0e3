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
#include "nsa_test_support.h"

using namespace inflight;
using kernels::KvDType;
using test::make_nsa_case;
using test::max_diff;
using test::max_excess;
using test::NsaCase;


TEST_SUITE("nsa_attention") {
  TEST_CASE("reference matches a dense double-precision softmax over the selected keys") {
    for (int mode : {0, 2}) {
      NsaCase c = make_nsa_case({5, 3}, {64, 48}, 4, 2, 32, 16, 16, 2, mode, KvDType::F32, 2, false);
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
            NsaCase ref = make_nsa_case({6, 3}, {kv_len, kv_len}, s.nq, s.nkv, 192, 128, s.bs, s.count, mode, dtype, 17,
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

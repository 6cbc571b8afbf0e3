// kernels/kv_dtype.h: names, the int8 / fp8 formulas (rounding, saturation, subnormals), grouped
// scales, and the SIMD widening of every 8-bit code inside the attention kernels.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "attention_test_support.h"

using namespace inflight;
using namespace inflight::kernels;

namespace {

// Independent decoder: sign, exponent, mantissa fields by the OCP definitions.
float decode_fp8(uint8_t c, int man_bits, int bias, bool e4m3) {
  const int exp_bits = 7 - man_bits;
  const int e = (c >> man_bits) & ((1 << exp_bits) - 1);
  const int m = c & ((1 << man_bits) - 1);
  const float sign = (c & 0x80) ? -1.0f : 1.0f;
  if (e4m3 && e == 15 && m == 7) return NAN;
  if (!e4m3 && e == 31) return m == 0 ? sign * INFINITY : NAN;
  if (e == 0) return sign * std::ldexp(float(m), 1 - bias - man_bits);
  return sign * std::ldexp(1.0f + float(m) / float(1 << man_bits), e - bias);
}

}  // namespace

TEST_SUITE("kv_dtype") {
  TEST_CASE("names parse back, aliases and '_' accepted, junk refused") {
    for (KvDType t : kAllKvDTypes) {
      KvDType back;
      REQUIRE(parse_kv_dtype(kv_dtype_name(t), &back));
      CHECK(back == t);
    }
    KvDType t;
    CHECK((parse_kv_dtype("fp8", &t) && t == KvDType::Fp8E4M3));
    CHECK((parse_kv_dtype("fp8_e5m2", &t) && t == KvDType::Fp8E5M2));
    CHECK((parse_kv_dtype("int8_static", &t) && t == KvDType::Int8Static));
    CHECK((parse_kv_dtype("bfloat16", &t) && t == KvDType::BF16));
    CHECK(!parse_kv_dtype("int4", &t));
    CHECK(!parse_kv_dtype("", &t));
  }

  TEST_CASE("fp8 decode matches the OCP definition for all 256 codes") {
    for (int c = 0; c < 256; ++c) {
      CAPTURE(c);
      const float a = fp8_e4m3_to_f32(uint8_t(c)), b = decode_fp8(uint8_t(c), 3, 7, true);
      CHECK(((std::isnan(a) && std::isnan(b)) || a == b));
      const float x = fp8_e5m2_to_f32(uint8_t(c)), y = decode_fp8(uint8_t(c), 2, 15, false);
      CHECK(((std::isnan(x) && std::isnan(y)) || x == y));
    }
    CHECK(fp8_e4m3_to_f32(0x7e) == kFp8E4M3Max);
    CHECK(fp8_e5m2_to_f32(0x7b) == kFp8E5M2Max);
  }

  TEST_CASE("fp8 encode: exact codes round-trip, ties go to even, out of range saturates") {
    for (int c = 0; c < 256; ++c) {
      const float v = fp8_e4m3_to_f32(uint8_t(c));
      if (!std::isnan(v) && c != 0x80) CHECK(f32_to_fp8_e4m3(v) == c);  // -0 encodes as 0x80 too
      const float w = fp8_e5m2_to_f32(uint8_t(c));
      if (std::isfinite(w) && c != 0x80) CHECK(f32_to_fp8_e5m2(w) == c);
    }
    // Between two neighbours: nearest, and the even mantissa on a tie.
    for (int c = 1; c < 0x7e; ++c) {
      const float lo = fp8_e4m3_to_f32(uint8_t(c)), hi = fp8_e4m3_to_f32(uint8_t(c + 1));
      const float mid = 0.5f * (lo + hi);
      CHECK(f32_to_fp8_e4m3(mid) == ((c & 1) ? c + 1 : c));
      CHECK(f32_to_fp8_e4m3(std::nextafter(mid, 0.0f)) == c);
      CHECK(f32_to_fp8_e4m3(std::nextafter(mid, 1e9f)) == c + 1);
      CHECK(f32_to_fp8_e4m3(-mid) == (0x80 | ((c & 1) ? c + 1 : c)));
    }
    CHECK(f32_to_fp8_e4m3(460.0f) == 0x7e);
    CHECK(f32_to_fp8_e4m3(1e9f) == 0x7e);
    CHECK(f32_to_fp8_e4m3(-INFINITY) == 0xfe);
    CHECK(f32_to_fp8_e5m2(60000.0f) == 0x7b);
    CHECK(f32_to_fp8_e5m2(INFINITY) == 0x7b);
    CHECK(f32_to_fp8_e5m2(-1e30f) == 0xfb);
    CHECK(f32_to_fp8_e4m3(1e-9f) == 0);              // below half the smallest subnormal
    CHECK(f32_to_fp8_e4m3(0.0029296875f) == 0x02);    // 1.5 * 2^-9, a tie: to even (2)
    CHECK(f32_to_fp8_e4m3(std::ldexp(1.0f, -9)) == 0x01);
  }

  TEST_CASE("int8: round to nearest even, clamp at +-127, NaN to 0") {
    CHECK(quantize_int8(2.5f, 1.0f) == 2);
    CHECK(quantize_int8(3.5f, 1.0f) == 4);
    CHECK(quantize_int8(-2.6f, 1.0f) == -3);
    CHECK(quantize_int8(1000.0f, 1.0f) == 127);
    CHECK(quantize_int8(-1000.0f, 1.0f) == -127);
    CHECK(quantize_int8(NAN, 1.0f) == 0);
  }

  TEST_CASE("grouped int8 rows: one scale per group, the group max maps to 127, error <= scale / 2") {
    std::mt19937 rng(1);
    std::normal_distribution<float> normal;
    for (int group : {8, 16, 32, 64}) {
      std::vector<float> x(64), back(64), scales(size_t(64 / group));
      for (float& v : x) v = normal(rng) * 3.0f;
      x[3] = 0.0f;
      std::vector<int8_t> q(64);
      KvRowScales s;
      s.group = scales.data();
      s.quant_group = group;
      kv_quantize_row(KvDType::Int8, x.data(), 64, q.data(), s);
      kv_dequantize_row(KvDType::Int8, q.data(), 64, back.data(), s);
      for (int g = 0; g < 64 / group; ++g) {
        float amax = 0.0f;
        int qmax = 0;
        for (int i = g * group; i < (g + 1) * group; ++i) {
          amax = std::max(amax, std::fabs(x[size_t(i)]));
          qmax = std::max(qmax, std::abs(int(q[size_t(i)])));
          CHECK(std::fabs(back[size_t(i)] - x[size_t(i)]) <= scales[size_t(g)] * 0.5f * 1.0001f);
        }
        CHECK(scales[size_t(g)] == doctest::Approx(amax / 127.0f));
        CHECK(qmax == 127);
      }
    }
    // An all-zero group stores scale 0 and zeros.
    std::vector<float> zeros(16, 0.0f), scale(1, -1.0f), back(16, 1.0f);
    std::vector<int8_t> q(16, 5);
    KvRowScales s;
    s.group = scale.data();
    s.quant_group = 16;
    kv_quantize_row(KvDType::Int8, zeros.data(), 16, q.data(), s);
    kv_dequantize_row(KvDType::Int8, q.data(), 16, back.data(), s);
    CHECK(scale[0] == 0.0f);
    CHECK(back == zeros);
  }

  TEST_CASE("every ISA widens every 8-bit code exactly as kv_dtype.h reads it") {
    // One cached key: attention returns its V row unchanged, so V = all 256 codes reads them back.
    test::IsaGuard guard;
    for (KvDType dtype : {KvDType::Int8, KvDType::Int8Static, KvDType::Fp8E4M3, KvDType::Fp8E5M2}) {
      test::PagedBatch b = test::make_batch({{1, 1}}, 1, 1, 256, 16, dtype, 1);
      b.quant_orig = dtype == KvDType::Int8Static ? 0.5f : 1.0f;
      PagedKvView kv = b.view();
      std::vector<float> want(256);
      for (int c = 0; c < 256; ++c) {
        const bool nan_code = (dtype == KvDType::Fp8E4M3 && (c & 0x7f) == 0x7f) ||
                              (dtype == KvDType::Fp8E5M2 && (c & 0x7f) > 0x7b);
        auto* v = static_cast<uint8_t*>(kv.row(kv.block_of(0, 0), 1, 0, 0));
        v[c] = nan_code ? 0 : uint8_t(c);
      }
      if (dtype == KvDType::Int8) kv.row_scales(kv.block_of(0, 0), 1, 0, 0).group[0] = 1.0f;
      const KvRowScales vs = kv.row_scales(kv.block_of(0, 0), 1, 0, 0);
      kv_dequantize_row(dtype, kv.row(kv.block_of(0, 0), 1, 0, 0), 256, want.data(), vs);
      for (kernels::cpu::Isa isa : test::supported_isas()) {
        CAPTURE(kernels::kv_dtype_name(dtype));
        CAPTURE(kernels::cpu::isa_name(isa));
        kernels::cpu::set_active_isa(isa);
        std::vector<float> out(256, NAN);
        AttentionParams p = b.params(out.data());
        p.kv = kv;
        p.k = p.v = nullptr;  // no append
        std::vector<int32_t> past{0};
        p.past_len = past.data();  // the row sits at position 0: it sees key 0 alone
        kernels::cpu::decode_attention(p, 0, 1);
        CHECK(out == want);
      }
    }
  }
}

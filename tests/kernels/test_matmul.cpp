// matmul for every dtype and ISA against a double-precision reference; batch invariance; dequantize_row.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "isa_test_support.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/matmul_kernels.h"
#include "kernels/dtype.h"
#include "kernels/matmul.h"
#include "kernels/thread_pool.h"

namespace {

using namespace inflight::kernels;
using cpu::Isa;
namespace test = inflight::test;

constexpr DType kAllDtypes[] = {DType::F32, DType::F16, DType::BF16, DType::Q8_0};

// Q8_0 as GGML writes it: per block of 32, d = amax / 127 (stored f16), q = round(x / d).
std::vector<uint8_t> quantize_q8_0(const float* src, int64_t n) {
  std::vector<uint8_t> out(size_t(n / kQ8BlockSize * kQ8BlockBytes));
  for (int64_t b = 0; b < n / kQ8BlockSize; ++b) {
    const float* x = src + b * kQ8BlockSize;
    float amax = 0.0f;
    for (int i = 0; i < kQ8BlockSize; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.0f;
    uint8_t* block = out.data() + b * kQ8BlockBytes;
    const uint16_t d16 = f32_to_f16(d);
    std::memcpy(block, &d16, 2);
    for (int i = 0; i < kQ8BlockSize; ++i) block[2 + i] = d == 0.0f ? 0 : uint8_t(int8_t(std::lround(x[i] / d)));
  }
  return out;
}

// A weight matrix in `dtype` built from `values` [rows, cols], plus the f32 values it really holds.
struct TestWeights {
  std::vector<uint8_t> bytes;
  std::vector<float> exact;  // [rows, cols] dequantised, computed here independently of dequantize_row
  WeightMatrix view(DType dtype, int64_t rows, int64_t cols) const { return {dtype, bytes.data(), rows, cols}; }
};

TestWeights make_weights(DType dtype, const std::vector<float>& values, int64_t rows, int64_t cols) {
  TestWeights w;
  const size_t n = values.size();
  w.exact.resize(n);
  switch (dtype) {
    case DType::F32:
      w.bytes.resize(n * 4);
      std::memcpy(w.bytes.data(), values.data(), n * 4);
      w.exact = values;
      break;
    case DType::F16:
    case DType::BF16: {
      w.bytes.resize(n * 2);
      auto* h = reinterpret_cast<uint16_t*>(w.bytes.data());
      for (size_t i = 0; i < n; ++i) {
        h[i] = dtype == DType::F16 ? f32_to_f16(values[i]) : f32_to_bf16(values[i]);
        w.exact[i] = dtype == DType::F16 ? f16_to_f32(h[i]) : bf16_to_f32(h[i]);
      }
      break;
    }
    case DType::Q8_0:
      for (int64_t r = 0; r < rows; ++r) {
        const std::vector<uint8_t> row = quantize_q8_0(values.data() + r * cols, cols);
        w.bytes.insert(w.bytes.end(), row.begin(), row.end());
        for (int64_t b = 0; b < cols / kQ8BlockSize; ++b) {
          uint16_t d16;
          std::memcpy(&d16, row.data() + b * kQ8BlockBytes, 2);
          const double d = f16_to_f32(d16);
          for (int i = 0; i < kQ8BlockSize; ++i) {
            const int8_t q = int8_t(row[size_t(b * kQ8BlockBytes + 2 + i)]);
            w.exact[size_t(r * cols + b * kQ8BlockSize + i)] = float(d * q);
          }
        }
      }
      break;
    default:  // the other block formats: test_matmul_quant.cpp
      FAIL("make_weights: unsupported dtype");
  }
  return w;
}

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

// The activations matmul really multiplies: x itself, or for Q8_0 x after the per-block int8
// quantisation (dequantised in double). [num_tokens, cols]
std::vector<double> effective_x(DType dtype, const std::vector<float>& x, int64_t cols, int64_t num_tokens) {
  std::vector<double> out(x.begin(), x.begin() + num_tokens * cols);
  if (dtype != DType::Q8_0) return out;
  std::vector<int8_t> q(static_cast<size_t>(cols));
  std::vector<float> d(size_t(cols / kQ8BlockSize)), m(size_t(cols / kQ8BlockSize));
  for (int64_t t = 0; t < num_tokens; ++t) {
    cpu::quantize_activations(x.data() + t * cols, cols, kQ8BlockSize, q.data(), d.data(), nullptr, m.data());
    for (int64_t c = 0; c < cols; ++c) out[size_t(t * cols + c)] = double(d[size_t(c / kQ8BlockSize)]) * q[size_t(c)];
  }
  return out;
}

// Checks y [num_tokens, rows] against sum_c exact[r, c] * x[t, c] in double. Tolerance: f32 rounding
// of a length-cols sum, relative to sum_c |w x| (ISAs differ only in summation order).
void check_against_reference(const std::vector<float>& exact, const std::vector<double>& x, const std::vector<float>& y,
                             int64_t rows, int64_t cols, int64_t num_tokens) {
  int num_bad = 0;
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t r = 0; r < rows; ++r) {
      double sum = 0.0, sum_abs = 0.0;
      for (int64_t c = 0; c < cols; ++c) {
        const double p = double(exact[size_t(r * cols + c)]) * x[size_t(t * cols + c)];
        sum += p;
        sum_abs += std::fabs(p);
      }
      const double got = y[size_t(t * rows + r)];
      const double tol = 1e-5 * sum_abs + 1e-6;
      if (std::fabs(got - sum) > tol && ++num_bad <= 5) {
        FAIL_CHECK("y[" << t << ", " << r << "] = " << got << ", want " << sum << " +- " << tol);
      }
    }
  }
  CHECK(num_bad == 0);
}

// matmul(w) of all num_tokens rows of x, of each token alone and of sub-batches in other tile slots equals
// want ([num_tokens, w.rows]) bit for bit.
void check_every_batch(const WeightMatrix& w, const std::vector<float>& x, const std::vector<float>& want, int64_t num_tokens) {
  std::vector<float> batch(want.size());
  matmul(w, x.data(), batch.data(), num_tokens);
  CHECK(std::memcmp(batch.data(), want.data(), want.size() * 4) == 0);
  for (int64_t begin : {0, 5, 13}) {
    for (int64_t n : {int64_t(1), int64_t(2), num_tokens - begin}) {
      std::vector<float> sub(size_t(n * w.rows));
      matmul(w, x.data() + begin * w.cols, sub.data(), n);
      CHECK(std::memcmp(sub.data(), want.data() + begin * w.rows, sub.size() * 4) == 0);
    }
  }
}

// Each output y[t, r] as one fmaf chain over the columns in order: the interleaved F16 / BF16 kernel's sum.
std::vector<float> fma_chains(const std::vector<float>& w, const std::vector<float>& x, int64_t rows, int64_t cols,
                              int64_t num_tokens) {
  std::vector<float> y(size_t(num_tokens * rows));
  for (int64_t t = 0; t < num_tokens; ++t)
    for (int64_t r = 0; r < rows; ++r) {
      float sum = 0.0f;
      for (int64_t c = 0; c < cols; ++c) sum = std::fma(w[size_t(r * cols + c)], x[size_t(t * cols + c)], sum);
      y[size_t(t * rows + r)] = sum;
    }
  return y;
}

}  // namespace

TEST_CASE("matmul matches a double reference for every dtype, ISA and odd shape") {
  test::IsaGuard restore;
  const std::vector<Isa> isas = test::supported_isas();
  const int64_t all_rows[] = {1, 3, 17, 64, 1000};
  const int64_t all_cols[] = {32, 64, 96, 2048};
  const int64_t all_tokens[] = {1, 2, 3, 5, 8, 13};
  for (DType dtype : kAllDtypes) {
    for (int64_t rows : all_rows) {
      for (int64_t cols : all_cols) {
        const auto values = random_values(size_t(rows * cols), uint32_t(rows * 7919 + cols));
        const TestWeights w = make_weights(dtype, values, rows, cols);
        const auto x = random_values(size_t(13 * cols), uint32_t(cols));
        const std::vector<double> x_eff = effective_x(dtype, x, cols, 13);
        for (int64_t num_tokens : all_tokens) {
          for (Isa isa : isas) {
            CAPTURE(dtype_name(dtype));
            CAPTURE(cpu::isa_name(isa));
            CAPTURE(rows);
            CAPTURE(cols);
            CAPTURE(num_tokens);
            REQUIRE(cpu::set_active_isa(isa));
            std::vector<float> y(size_t(num_tokens * rows), NAN);
            matmul(w.view(dtype, rows, cols), x.data(), y.data(), num_tokens);
            check_against_reference(w.exact, x_eff, y, rows, cols, num_tokens);
          }
        }
      }
    }
  }
}

TEST_CASE("matmul handles column counts that are not a multiple of the vector width (float dtypes)") {
  test::IsaGuard restore;
  const int64_t rows = 19;
  for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
    for (int64_t cols : {1, 7, 9, 17, 31, 33, 100, 172}) {
      const auto values = random_values(size_t(rows * cols), uint32_t(cols));
      const TestWeights w = make_weights(dtype, values, rows, cols);
      const auto x = random_values(size_t(5 * cols), uint32_t(cols + 1));
      for (Isa isa : test::supported_isas()) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(cpu::isa_name(isa));
        CAPTURE(cols);
        REQUIRE(cpu::set_active_isa(isa));
        std::vector<float> y(size_t(5 * rows), NAN);
        matmul(w.view(dtype, rows, cols), x.data(), y.data(), 5);
        check_against_reference(w.exact, effective_x(dtype, x, cols, 5), y, rows, cols, 5);
      }
    }
  }
}

TEST_CASE("matmul is batch invariant: a token's row is bit-identical alone or in any batch") {
  test::IsaGuard restore;
  const int64_t num_tokens = 13;
  const int64_t rows = 37;  // row blocks of 8 plus a ragged tail
  for (DType dtype : kAllDtypes) {
    for (int64_t cols : {96, 100, 2048}) {
      if (dtype == DType::Q8_0 && cols % kQ8BlockSize != 0) continue;
      const auto values = random_values(size_t(rows * cols), uint32_t(cols * 3));
      const TestWeights w = make_weights(dtype, values, rows, cols);
      const WeightMatrix wm = w.view(dtype, rows, cols);
      const auto x = random_values(size_t(num_tokens * cols), uint32_t(cols * 5));
      for (Isa isa : test::supported_isas()) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(cpu::isa_name(isa));
        CAPTURE(cols);
        REQUIRE(cpu::set_active_isa(isa));
        std::vector<float> batch(size_t(num_tokens * rows));
        matmul(wm, x.data(), batch.data(), num_tokens);
        for (int64_t t = 0; t < num_tokens; ++t) {
          std::vector<float> alone(static_cast<size_t>(rows));
          matmul(wm, x.data() + t * cols, alone.data(), 1);
          CHECK(std::memcmp(alone.data(), batch.data() + t * rows, size_t(rows) * 4) == 0);
        }
        // Sub-batches shift every token into a different slot of its token tile.
        for (int64_t begin : {1, 2, 3}) {
          const int64_t n = num_tokens - begin - 1;
          std::vector<float> sub(size_t(n * rows));
          matmul(wm, x.data() + begin * cols, sub.data(), n);
          CHECK(std::memcmp(sub.data(), batch.data() + begin * rows, size_t(n * rows) * 4) == 0);
        }
      }
    }
  }
}

TEST_CASE("matmul results do not depend on the thread count") {
  // A group of three matrices (as Q, K, V) at 1 and 3 tokens, where threads done with their own band of
  // row blocks take blocks from the back of the others' bands, and at 9 tokens (tasks per token slice):
  // every row is written, once, and the same way as by one thread.
  test::IsaGuard restore;
  const int saved_threads = compute_pool().num_threads();
  const int64_t rows = 1000, cols = 2048;
  const int64_t group_rows[] = {rows, 96, 130};
  const auto values = random_values(size_t(rows * cols), 11);
  const TestWeights w = make_weights(DType::F16, values, rows, cols);
  const WeightMatrix mats[] = {w.view(DType::F16, group_rows[0], cols), w.view(DType::F16, group_rows[1], cols),
                               w.view(DType::F16, group_rows[2], cols)};
  for (int64_t num_tokens : {1, 3, 9}) {
    CAPTURE(num_tokens);
    const auto x = random_values(size_t(num_tokens * cols), 12);
    const auto run = [&](int threads) {
      set_num_threads(threads);
      std::vector<std::vector<float>> y;
      std::vector<MatmulTarget> targets;
      for (int64_t r : group_rows) y.emplace_back(size_t(num_tokens * r), std::nanf(""));
      for (size_t i = 0; i < y.size(); ++i) targets.push_back({&mats[i], y[i].data()});
      matmul(targets, x.data(), num_tokens);
      return y;
    };
    for (Isa isa : test::supported_isas()) {
      CAPTURE(cpu::isa_name(isa));
      REQUIRE(cpu::set_active_isa(isa));
      const auto y1 = run(1);
      for (const auto& m : y1)
        for (float v : m) REQUIRE(std::isfinite(v));
      for (int threads : {2, 3, 5}) {
        CAPTURE(threads);
        const auto yn = run(threads);
        for (size_t i = 0; i < y1.size(); ++i) CHECK(std::memcmp(y1[i].data(), yn[i].data(), y1[i].size() * 4) == 0);
      }
    }
  }
  set_num_threads(saved_threads);
}

TEST_CASE("matmul Q8_0 differs from unquantised-activation math by at most the activation rounding") {
  test::IsaGuard restore;
  const int64_t rows = 64, cols = 2048, num_tokens = 3;
  const auto values = random_values(size_t(rows * cols), 21);
  const TestWeights w = make_weights(DType::Q8_0, values, rows, cols);
  auto x = random_values(size_t(num_tokens * cols), 22);
  x[5] = 40.0f;  // an outlier coarsens its block's step
  for (Isa isa : test::supported_isas()) {
    CAPTURE(cpu::isa_name(isa));
    REQUIRE(cpu::set_active_isa(isa));
    std::vector<float> y(size_t(num_tokens * rows));
    matmul(w.view(DType::Q8_0, rows, cols), x.data(), y.data(), num_tokens);
    for (int64_t t = 0; t < num_tokens; ++t) {
      for (int64_t r = 0; r < rows; ++r) {
        // |x - xd * xq| <= xd / 2 per element, xd = block amax / 127
        double exact = 0, bound = 0, sum_abs = 0;
        for (int64_t b = 0; b < cols / kQ8BlockSize; ++b) {
          double amax = 0, wsum = 0;
          for (int i = 0; i < kQ8BlockSize; ++i) {
            const int64_t c = b * kQ8BlockSize + i;
            const double wc = w.exact[size_t(r * cols + c)], xc = x[size_t(t * cols + c)];
            exact += wc * xc;
            sum_abs += std::fabs(wc * xc);
            amax = std::max(amax, std::fabs(xc));
            wsum += std::fabs(wc);
          }
          bound += 0.5 * amax / 127.0 * wsum;
        }
        CHECK(std::fabs(y[size_t(t * rows + r)] - exact) <= bound * 1.0001 + 1e-5 * sum_abs);
      }
    }
  }
}

TEST_CASE("matmul Q8_0 with VNNI equals the maddubs AVX-512 path bit for bit") {
  test::IsaGuard restore;
  if (!cpu::isa_supported(Isa::Avx512Vnni)) {
    MESSAGE("skipping: this CPU lacks AVX-512 VNNI");
    return;
  }
  const int64_t rows = 45, cols = 256, num_tokens = 7;
  const auto values = random_values(size_t(rows * cols), 31);
  const TestWeights w = make_weights(DType::Q8_0, values, rows, cols);
  const auto x = random_values(size_t(num_tokens * cols), 32);
  std::vector<float> plain(size_t(num_tokens * rows)), vnni(plain.size());
  REQUIRE(cpu::set_active_isa(Isa::Avx512));
  matmul(w.view(DType::Q8_0, rows, cols), x.data(), plain.data(), num_tokens);
  REQUIRE(cpu::set_active_isa(Isa::Avx512Vnni));
  matmul(w.view(DType::Q8_0, rows, cols), x.data(), vnni.data(), num_tokens);
  CHECK(std::memcmp(plain.data(), vnni.data(), plain.size() * 4) == 0);
}

TEST_CASE("interleaved Q8_0 equals the scalar kernel on the plain matrix, bit for bit, under every ISA") {
  test::IsaGuard restore;
  const int64_t num_tokens = 21;  // token tiles of 8 plus a ragged tail
  for (int64_t cols : {32, 96, 576, 2048}) {
    const int64_t rows = 48;
    const auto values = random_values(size_t(rows * cols), uint32_t(cols * 7));
    TestWeights w = make_weights(DType::Q8_0, values, rows, cols);
    // A block of -128 quants (a file may hold them) and a zero block.
    for (int i = 0; i < kQ8BlockSize; ++i) w.bytes[size_t(kQ8BlockBytes + 2 + i)] = 0x80;
    std::memset(w.bytes.data() + 3 * row_bytes(DType::Q8_0, cols), 0, kQ8BlockBytes);
    const WeightMatrix plain = w.view(DType::Q8_0, rows, cols);
    std::vector<uint8_t> bytes(w.bytes.size());
    const WeightMatrix inter = interleave_rows(plain, bytes.data());
    REQUIRE(inter.interleaved);
    auto x = random_values(size_t(num_tokens * cols), uint32_t(cols * 9));
    x[3] = 30.0f;  // an outlier
    REQUIRE(cpu::set_active_isa(Isa::Scalar));
    std::vector<float> want(size_t(num_tokens * rows));
    matmul(plain, x.data(), want.data(), num_tokens);
    for (Isa isa : test::supported_isas()) {
      CAPTURE(cpu::isa_name(isa));
      CAPTURE(cols);
      REQUIRE(cpu::set_active_isa(isa));
      check_every_batch(inter, x, want, num_tokens);
    }
    // Rows read back from the interleaved layout are the plain rows.
    std::vector<float> a(static_cast<size_t>(cols)), b(a.size());
    for (int64_t r = 0; r < rows; ++r) {
      matrix_row(plain, r, a.data());
      matrix_row(inter, r, b.data());
      REQUIRE(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
    }
  }
}

TEST_CASE("interleaved Q8_0 in a group with plain matrices gives each matrix's bits alone") {
  test::IsaGuard restore;
  const int64_t cols = 256, num_tokens = 6;
  const auto v1 = random_values(size_t(32 * cols), 41), v2 = random_values(size_t(24 * cols), 42);
  const TestWeights w1 = make_weights(DType::Q8_0, v1, 32, cols), w2 = make_weights(DType::F16, v2, 24, cols);
  std::vector<uint8_t> bytes(w1.bytes.size());
  const WeightMatrix inter = interleave_rows(w1.view(DType::Q8_0, 32, cols), bytes.data());
  const WeightMatrix other = w2.view(DType::F16, 24, cols);
  const auto x = random_values(size_t(num_tokens * cols), 43);
  for (Isa isa : test::supported_isas()) {
    CAPTURE(cpu::isa_name(isa));
    REQUIRE(cpu::set_active_isa(isa));
    std::vector<float> y1(size_t(num_tokens * 32)), y2(size_t(num_tokens * 24)), a1(y1.size()), a2(y2.size());
    const MatmulTarget targets[] = {{&inter, y1.data()}, {&other, y2.data()}};
    matmul(targets, x.data(), num_tokens);
    matmul(inter, x.data(), a1.data(), num_tokens);
    matmul(other, x.data(), a2.data(), num_tokens);
    CHECK(std::memcmp(y1.data(), a1.data(), y1.size() * 4) == 0);
    CHECK(std::memcmp(y2.data(), a2.data(), y2.size() * 4) == 0);
  }
}

TEST_CASE("interleaved F16 / BF16 sum each output in column order with one FMA per step, under every ISA") {
  test::IsaGuard restore;
  test::HalfTilesGuard restore_tiles;
  const int64_t num_tokens = 29;  // token tiles of 12 plus a ragged tail
  for (DType dtype : {DType::F16, DType::BF16}) {
    for (int64_t cols : {1, 17, 64, 576, 1024}) {  // AVX-512 without half tiles: 1024 packed, the rest rows
      CAPTURE(dtype_name(dtype));
      CAPTURE(cols);
      const int64_t rows = 96;
      const auto values = random_values(size_t(rows * cols), uint32_t(cols * 11));
      const TestWeights w = make_weights(dtype, values, rows, cols);
      std::vector<uint8_t> bytes(w.bytes.size());
      const WeightMatrix inter = interleave_rows(w.view(dtype, rows, cols), bytes.data());
      REQUIRE(inter.interleaved);
      auto x = random_values(size_t(num_tokens * cols), uint32_t(cols * 13));
      x[0] = 1e4f;  // an outlier: a sum that cancels shows any change of order or rounding
      const std::vector<float> want = fma_chains(w.exact, x, rows, cols, num_tokens);
      for (Isa isa : test::supported_isas()) {
        CAPTURE(cpu::isa_name(isa));
        REQUIRE(cpu::set_active_isa(isa));
        for (bool half_tiles : {true, false}) {  // AVX-512 prefill: Intel's and AMD's tiling
          CAPTURE(half_tiles);
          cpu::set_prefill_half_tiles(half_tiles);
          check_every_batch(inter, x, want, num_tokens);
        }
      }
      // Rows read back from the interleaved layout are the plain rows; interleaving in place gives the
      // same bytes as into a second buffer.
      std::vector<float> row(static_cast<size_t>(cols));
      for (int64_t r = 0; r < rows; ++r) {
        matrix_row(inter, r, row.data());
        REQUIRE(std::memcmp(row.data(), w.exact.data() + r * cols, row.size() * 4) == 0);
      }
      std::vector<uint8_t> in_place = w.bytes;
      interleave_rows(WeightMatrix{dtype, in_place.data(), rows, cols}, in_place.data());
      CHECK(in_place == bytes);
    }
  }
}

TEST_CASE("interleave_rows over the compute pool gives the same bytes for any number of threads, in place too") {
  // Tasks of about 1 MiB of groups: 2.5 MiB of F16 (40 groups of 32 rows) and 2.1 MiB of Q8_0 (128 groups of
  // 16) each take several.
  const int64_t cols = 1024;
  const int saved_threads = compute_pool().num_threads();
  for (const auto& [dtype, rows] : {std::pair{DType::F16, int64_t(1280)}, std::pair{DType::Q8_0, int64_t(2048)}}) {
    CAPTURE(dtype_name(dtype));
    const auto values = random_values(size_t(rows * cols), 91);
    const TestWeights w = make_weights(dtype, values, rows, cols);
    std::vector<uint8_t> one(w.bytes.size());
    set_num_threads(1);
    interleave_rows(w.view(dtype, rows, cols), one.data());
    for (int threads : {2, 3}) {
      CAPTURE(threads);
      set_num_threads(threads);
      std::vector<uint8_t> out(w.bytes.size());
      interleave_rows(w.view(dtype, rows, cols), out.data());
      CHECK(out == one);
      std::vector<uint8_t> in_place = w.bytes;
      interleave_rows(WeightMatrix{dtype, in_place.data(), rows, cols}, in_place.data());
      CHECK(in_place == one);
    }
    set_num_threads(saved_threads);
    std::vector<float> row(static_cast<size_t>(cols)), want(row.size());
    const WeightMatrix plain = w.view(dtype, rows, cols), inter{dtype, one.data(), rows, cols, true};
    for (int64_t r : {int64_t(0), rows / 2 + 5, rows - 1}) {
      matrix_row(plain, r, want.data());
      matrix_row(inter, r, row.data());
      CHECK(std::memcmp(row.data(), want.data(), row.size() * 4) == 0);
    }
  }
}

TEST_CASE("a prefill's interleaved F16 / BF16 matmul, split into token slices over the pool, keeps every bit") {
  // 151 tokens: 3 slices of the compute pool's tasks (48, 48 and 55 tokens, the last with a ragged token
  // tile); the sub-batches start at tokens 5 and 13, so every token sits in another slot of its tile.
  test::IsaGuard restore;
  test::HalfTilesGuard restore_tiles;
  const int64_t num_tokens = 151, rows = 96, cols = 200;
  for (DType dtype : {DType::F16, DType::BF16}) {
    CAPTURE(dtype_name(dtype));
    const auto values = random_values(size_t(rows * cols), 71);
    const TestWeights w = make_weights(dtype, values, rows, cols);
    std::vector<uint8_t> bytes(w.bytes.size());
    const WeightMatrix inter = interleave_rows(w.view(dtype, rows, cols), bytes.data());
    auto x = random_values(size_t(num_tokens * cols), 73);
    x[size_t(100 * cols)] = -1e4f;  // an outlier in the second slice
    const std::vector<float> want = fma_chains(w.exact, x, rows, cols, num_tokens);
    for (Isa isa : test::supported_isas()) {
      CAPTURE(cpu::isa_name(isa));
      REQUIRE(cpu::set_active_isa(isa));
      for (bool half_tiles : {true, false}) {
        CAPTURE(half_tiles);
        cpu::set_prefill_half_tiles(half_tiles);
        check_every_batch(inter, x, want, num_tokens);
      }
    }
  }
}

TEST_CASE("interleaving_pays: Q4_0 / Q5_0 / K-quants with rows a multiple of 16 under AVX-512 VNNI, Q8_0 of 16 and F16 / BF16 of 32 under AVX2") {
  test::IsaGuard restore;
  const WeightMatrix q8{DType::Q8_0, nullptr, 64, 64}, odd{DType::Q8_0, nullptr, 40, 64}, f16{DType::F16, nullptr, 64, 64},
      bf16{DType::BF16, nullptr, 96, 64}, f16_odd{DType::F16, nullptr, 48, 64}, f32{DType::F32, nullptr, 64, 64};
  const WeightMatrix q4{DType::Q4_0, nullptr, 48, 576}, q5{DType::Q5_0, nullptr, 16, 64}, q5_odd{DType::Q5_0, nullptr, 40, 64},
      q5_long{DType::Q5_0, nullptr, 16, 65536}, q4_1{DType::Q4_1, nullptr, 64, 64}, q4_k{DType::Q4_K, nullptr, 64, 256},
      q4_k_long{DType::Q4_K, nullptr, 16, 65536}, q4_k_odd{DType::Q4_K, nullptr, 40, 256}, q5_k{DType::Q5_K, nullptr, 32, 512},
      q6_k{DType::Q6_K, nullptr, 64, 256};
  for (Isa isa : test::supported_isas()) {
    CAPTURE(cpu::isa_name(isa));
    REQUIRE(cpu::set_active_isa(isa));
    CHECK(interleaving_pays(q4) == (isa >= Isa::Avx512Vnni));
    CHECK(interleaving_pays(q5) == (isa >= Isa::Avx512Vnni));
    CHECK_FALSE(interleaving_pays(q5_odd));
    CHECK(interleaving_pays(q5_long) == (isa >= Isa::Avx512Vnni));  // no scratch: every batch runs the group tile
    CHECK_FALSE(interleaving_pays(q4_1));
    CHECK(interleaving_pays(q4_k) == (isa >= Isa::Avx512Vnni));
    CHECK(interleaving_pays(q4_k_long) == (isa >= Isa::Avx512Vnni));
    CHECK_FALSE(interleaving_pays(q4_k_odd));
    CHECK(interleaving_pays(q5_k) == (isa >= Isa::Avx512Vnni));
    CHECK(interleaving_pays(q6_k) == (isa >= Isa::Avx512Vnni));
    CHECK(interleaving_pays(q8) == (isa >= Isa::Avx2));
    CHECK_FALSE(interleaving_pays(odd));
    CHECK(interleaving_pays(f16) == (isa >= Isa::Avx2));
    CHECK(interleaving_pays(bf16) == (isa >= Isa::Avx2));
    CHECK_FALSE(interleaving_pays(f16_odd));
    CHECK_FALSE(interleaving_pays(f32));
  }
}

TEST_CASE("matmul Q8_0 handles quants of -128, which GGML never writes but a file may hold") {
  test::IsaGuard restore;
  const int64_t rows = 2, cols = 64;
  std::vector<uint8_t> bytes(size_t(rows * row_bytes(DType::Q8_0, cols)));
  std::vector<float> exact(size_t(rows * cols));
  for (int64_t b = 0; b < rows * cols / kQ8BlockSize; ++b) {
    uint8_t* blk = bytes.data() + b * kQ8BlockBytes;
    const uint16_t d16 = f32_to_f16(0.01f);
    std::memcpy(blk, &d16, 2);
    for (int i = 0; i < kQ8BlockSize; ++i) {
      const int8_t q = i % 3 == 0 ? int8_t(-128) : int8_t(i * 7 - 100);
      blk[2 + i] = uint8_t(q);
      exact[size_t(b * kQ8BlockSize + i)] = f16_to_f32(d16) * float(q);
    }
  }
  const auto x = random_values(size_t(cols), 33);
  for (Isa isa : test::supported_isas()) {
    CAPTURE(cpu::isa_name(isa));
    REQUIRE(cpu::set_active_isa(isa));
    std::vector<float> y(static_cast<size_t>(rows));
    matmul({DType::Q8_0, bytes.data(), rows, cols}, x.data(), y.data(), 1);
    check_against_reference(exact, effective_x(DType::Q8_0, x, cols, 1), y, rows, cols, 1);
  }
}

TEST_CASE("Q8_0 activations keep |q| <= 127 and x within half a step plus the f16 rounding of the step") {
  // q = round(x * 127 / amax) is within half of the exact step s = amax / 127; the kept step d is s rounded
  // to f16 (relative 2^-11), which moves d * q by up to 127 * 2^-11 * s more.
  const auto x = random_values(3 * kQ8BlockSize, 41);
  std::vector<int8_t> q(x.size());
  std::vector<float> d(3), m(3);
  cpu::quantize_activations(x.data(), int64_t(x.size()), kQ8BlockSize, q.data(), d.data(), nullptr, m.data());
  for (size_t i = 0; i < x.size(); ++i) {
    const float step = d[i / kQ8BlockSize];
    CHECK(std::abs(int(q[i])) <= 127);
    CHECK(std::fabs(double(step) * q[i] - x[i]) <= (0.5 + 127.0 / 2048) * step * 1.001);
  }
  const std::vector<float> zeros(kQ8BlockSize, 0.0f);
  cpu::quantize_activations(zeros.data(), kQ8BlockSize, kQ8BlockSize, q.data(), d.data(), nullptr, m.data());
  CHECK(d[0] == 0.0f);
  CHECK(q[0] == 0);
}

TEST_CASE("activation quantisation: the AVX2 and AVX-512 versions give the scalar version's bits (blocks of 32 and 256)") {
  if (!cpu::isa_supported(Isa::Avx2)) {
    MESSAGE("skipped: this CPU has no AVX2");
    return;
  }
  // Random rows; rows where the largest magnitude comes twice with both signs (the first one's sign
  // wins in blocks of 256); all-zero blocks; values exactly on rounding midpoints (amax 127, so x is
  // scaled by exactly 1 or -1 and k + 1/2 must round to even, as quantised embeddings need); tiny and
  // huge magnitudes (f16 subnormal and overflowing steps).
  const int64_t n = 1536;
  std::vector<std::vector<float>> rows;
  for (int seed = 0; seed < 8; ++seed) rows.push_back(random_values(n, uint32_t(100 + seed)));
  std::vector<float> ties = random_values(n, 7);
  for (int64_t b = 0; b < n / 32; ++b) {
    ties[size_t(b * 32 + 5)] = 127.0f;
    ties[size_t(b * 32 + 9)] = -127.0f;
    for (int i = 10; i < 32; ++i) ties[size_t(b * 32 + i)] = float(i % 7 - 3) + 0.5f;
  }
  rows.push_back(ties);
  std::vector<float> zeros = random_values(n, 8);
  std::fill(zeros.begin(), zeros.begin() + 256 + 32, 0.0f);
  rows.push_back(zeros);
  std::vector<float> scales = random_values(n, 9);
  for (int64_t i = 0; i < n; ++i) scales[size_t(i)] *= (i / 256) % 2 == 0 ? 1e-6f : 3e5f;
  rows.push_back(scales);
  for (size_t r = 0; r < rows.size(); ++r) {
    CAPTURE(r);
    for (const int block : {32, 256}) {
      CAPTURE(block);
      struct Out {
        std::vector<int8_t> q = std::vector<int8_t>(n);
        std::vector<float> d = std::vector<float>(n / 32), m = std::vector<float>(n / 32);
        std::vector<int16_t> s = std::vector<int16_t>(n / 16);
        std::vector<int32_t> o = std::vector<int32_t>(n / 4), c = std::vector<int32_t>(n / 32);
      } a;
      const bool k = block == 256;
      cpu::quantize_activations_scalar(rows[r].data(), n, block, a.q.data(), a.d.data(), a.s.data(),
                                       k ? nullptr : a.m.data(), k ? nullptr : a.o.data(), k ? nullptr : a.c.data());
      for (const Isa isa : {Isa::Avx2, Isa::Avx512}) {
        if (!cpu::isa_supported(isa)) continue;
        CAPTURE(cpu::isa_name(isa));
        Out b;
        (isa == Isa::Avx2 ? cpu::quantize_activations_avx2 : cpu::quantize_activations_avx512)(
            rows[r].data(), n, block, b.q.data(), b.d.data(), b.s.data(), k ? nullptr : b.m.data(),
            k ? nullptr : b.o.data(), k ? nullptr : b.c.data());
        CHECK(a.q == b.q);
        CHECK(std::memcmp(a.d.data(), b.d.data(), a.d.size() * sizeof(float)) == 0);
        CHECK(std::memcmp(a.m.data(), b.m.data(), a.m.size() * sizeof(float)) == 0);
        CHECK(a.s == b.s);
        CHECK(a.o == b.o);
        CHECK(a.c == b.c);
      }
    }
  }
}

TEST_CASE("quantize_q8_0 test helper round-trips within half a step") {
  const auto values = random_values(4 * kQ8BlockSize, 3);
  const auto q = quantize_q8_0(values.data(), int64_t(values.size()));
  REQUIRE(q.size() == 4 * kQ8BlockBytes);
  std::vector<float> back(values.size());
  dequantize_row(DType::Q8_0, q.data(), back.data(), int64_t(values.size()));
  for (int b = 0; b < 4; ++b) {
    uint16_t d16;
    std::memcpy(&d16, q.data() + b * kQ8BlockBytes, 2);
    const float d = f16_to_f32(d16);
    for (int i = 0; i < kQ8BlockSize; ++i) {
      const size_t k = size_t(b * kQ8BlockSize + i);
      CHECK(std::fabs(back[k] - values[k]) <= 0.5f * d + 1e-3f * std::fabs(values[k]));
    }
  }
}

TEST_CASE("quantize_row_q8_0 agrees with the test helper and dequantize_row inverts it") {
  auto values = random_values(8 * kQ8BlockSize, 51);
  for (int i = 0; i < kQ8BlockSize; ++i) values[size_t(3 * kQ8BlockSize + i)] = 0.0f;  // an all-zero block
  const auto want = quantize_q8_0(values.data(), int64_t(values.size()));
  std::vector<uint8_t> got(want.size());
  quantize_row_q8_0(values.data(), got.data(), int64_t(values.size()));
  int num_off = 0;
  for (size_t b = 0; b < 8; ++b) {
    CHECK(std::memcmp(&got[b * kQ8BlockBytes], &want[b * kQ8BlockBytes], 2) == 0);  // same f16 scale
    for (int i = 0; i < kQ8BlockSize; ++i) {
      const int diff = int(int8_t(got[b * kQ8BlockBytes + 2 + i])) - int(int8_t(want[b * kQ8BlockBytes + 2 + i]));
      CHECK(std::abs(diff) <= 1);  // x * (1 / d) and x / d may round apart at exact halves
      num_off += diff != 0;
    }
  }
  CHECK(num_off <= 2);
}

TEST_CASE("dequantize_row expands every dtype") {
  SUBCASE("f32 copies") {
    const float src[3] = {1.5f, -0.0f, 3e-39f};
    float dst[3];
    dequantize_row(DType::F32, src, dst, 3);
    CHECK(std::memcmp(src, dst, sizeof(src)) == 0);
  }
  SUBCASE("f16 normal, subnormal, max, inf") {
    const uint16_t src[6] = {0x3c00, 0xc000, 0x0001, 0x7bff, 0x7c00, 0x3555};
    float dst[6];
    dequantize_row(DType::F16, src, dst, 6);
    CHECK(dst[0] == 1.0f);
    CHECK(dst[1] == -2.0f);
    CHECK(dst[2] == std::ldexp(1.0f, -24));
    CHECK(dst[3] == 65504.0f);
    CHECK(std::isinf(dst[4]));
    CHECK(dst[5] == doctest::Approx(0.333251953125));
  }
  SUBCASE("bf16") {
    const uint16_t src[3] = {0x3f80, 0xc040, 0x4049};
    float dst[3];
    dequantize_row(DType::BF16, src, dst, 3);
    CHECK(dst[0] == 1.0f);
    CHECK(dst[1] == -3.0f);
    CHECK(dst[2] == 3.140625f);
  }
  SUBCASE("q8_0 is d * q per block") {
    uint8_t src[2 * kQ8BlockBytes];
    const uint16_t d0 = f32_to_f16(0.5f), d1 = f32_to_f16(-0.25f);
    std::memcpy(src, &d0, 2);
    std::memcpy(src + kQ8BlockBytes, &d1, 2);
    for (int i = 0; i < kQ8BlockSize; ++i) {
      src[2 + i] = uint8_t(int8_t(i - 16));
      src[kQ8BlockBytes + 2 + i] = uint8_t(int8_t(127 - 8 * i));
    }
    float dst[2 * kQ8BlockSize];
    dequantize_row(DType::Q8_0, src, dst, 2 * kQ8BlockSize);
    for (int i = 0; i < kQ8BlockSize; ++i) {
      CHECK(dst[i] == 0.5f * float(i - 16));
      CHECK(dst[kQ8BlockSize + i] == -0.25f * float(int8_t(127 - 8 * i)));
    }
  }
}

TEST_CASE("dtype_name and ISA names") {
  CHECK(dtype_name(DType::F32) == "f32");
  CHECK(dtype_name(DType::F16) == "f16");
  CHECK(dtype_name(DType::BF16) == "bf16");
  CHECK(dtype_name(DType::Q8_0) == "q8_0");
  Isa isa;
  CHECK(cpu::parse_isa("avx2", &isa));
  CHECK(isa == Isa::Avx2);
  CHECK_FALSE(cpu::parse_isa("sse", &isa));
  CHECK(cpu::isa_supported(Isa::Scalar));
  CHECK(cpu::set_active_isa(Isa::Scalar));
  CHECK(cpu::active_isa() == Isa::Scalar);
  CHECK(cpu::set_active_isa(cpu::detected_isa()));
  MESSAGE("detected ISA: " << cpu::isa_name(cpu::detected_isa()));
}

TEST_CASE("packing a token tile: the AVX2 and AVX-512 transposes write the scalar one's floats") {
  for (int64_t cols : {1, 7, 8, 9, 17, 64, 100}) {
    for (int64_t n = 1; n <= 16; ++n) {
      CAPTURE(cols);
      CAPTURE(n);
      const auto x = random_values(size_t(n * cols), uint32_t(cols * 31 + n));
      std::vector<float> want(size_t(n * cols) + 8, -7.0f);  // 8 guard floats past the end
      cpu::pack_token_tile_scalar(x.data(), cols, n, want.data());
      if (cpu::isa_supported(Isa::Avx2)) {
        std::vector<float> got(want.size(), -7.0f);
        cpu::pack_token_tile_avx2(x.data(), cols, n, got.data());
        CHECK(std::memcmp(got.data(), want.data(), got.size() * 4) == 0);
      }
      if (cpu::isa_supported(Isa::Avx512)) {
        std::vector<float> got(want.size(), -7.0f);
        cpu::pack_token_tile_avx512(x.data(), cols, n, got.data());
        CHECK(std::memcmp(got.data(), want.data(), got.size() * 4) == 0);
      }
    }
  }
}

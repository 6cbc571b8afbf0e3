// matmul for the GGML block formats Q4_0 .. Q6_K on every ISA of this CPU: against a double-precision
// dequantize-then-multiply reference, bit-identical across ISAs, batch invariant, and within the
// activation rounding of plain f32 math.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "isa_test_support.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/matmul_kernels.h"
#include "kernels/dtype.h"
#include "kernels/matmul.h"

namespace {

using namespace inflight::kernels;
using cpu::Isa;
namespace test = inflight::test;

constexpr DType kQuantDtypes[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                                  DType::Q4_K, DType::Q5_K, DType::Q6_K};

std::vector<float> random_values(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

// Weights quantised by quantize_row and the values they hold (dequantize_row; tested on its own).
struct QuantWeights {
  std::vector<uint8_t> bytes;
  std::vector<float> exact;  // [rows, cols]
  WeightMatrix view(DType t, int64_t rows, int64_t cols) const { return {t, bytes.data(), rows, cols}; }
};

QuantWeights quantize(DType t, const std::vector<float>& values, int64_t rows, int64_t cols) {
  QuantWeights w;
  w.bytes.resize(size_t(rows * row_bytes(t, cols)));
  w.exact.resize(values.size());
  for (int64_t r = 0; r < rows; ++r) {
    quantize_row(t, values.data() + r * cols, w.bytes.data() + r * row_bytes(t, cols), cols);
    dequantize_row(t, w.bytes.data() + r * row_bytes(t, cols), w.exact.data() + r * cols, cols);
  }
  return w;
}

// The activations the kernels multiply: per block of activation_block_size, xd * xq. [num_tokens, cols]
// s (optional): per 32-block, xd * sum(xq) rounded to f16, what Q4_1 / Q5_1 multiply their min by
// (llama.cpp's Q8_1 block stores it so). [num_tokens, cols / 32]
std::vector<double> effective_x(DType t, const std::vector<float>& x, int64_t cols, int64_t num_tokens,
                                std::vector<double>* s32 = nullptr) {
  const int block = cpu::activation_block_size(t);
  std::vector<double> out(size_t(num_tokens * cols));
  std::vector<int8_t> q(static_cast<size_t>(cols));
  std::vector<float> d(size_t(cols / block));
  std::vector<int16_t> s(size_t(cols / 16));
  std::vector<float> m(size_t(cols / 32));
  for (int64_t t0 = 0; t0 < num_tokens; ++t0) {
    cpu::quantize_activations(x.data() + t0 * cols, cols, block, q.data(), d.data(), s.data(), m.data());
    for (int64_t c = 0; c < cols; ++c) out[size_t(t0 * cols + c)] = double(d[size_t(c / block)]) * q[size_t(c)];
    for (int64_t g = 0; g < cols / 16; ++g) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += q[size_t(g * 16 + i)];
      CHECK(s[size_t(g)] == sum);
    }
    if (block == 32) {
      // llama.cpp's Q8_0 / Q8_1: d = amax / 127 and d * sum(q), both kept as f16
      for (int64_t b = 0; b < cols / 32; ++b) {
        float amax = 0.0f;
        for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[size_t(t0 * cols + b * 32 + i)]));
        const float scale = amax / 127.0f;
        CHECK(d[size_t(b)] == f16_to_f32(f32_to_f16(scale)));
        const float sm = f16_to_f32(f32_to_f16(scale * float(s[size_t(2 * b)] + s[size_t(2 * b + 1)])));
        CHECK(m[size_t(b)] == sm);
        if (s32) s32->push_back(sm);
      }
    }
  }
  return out;
}

// y against sum_c exact[r, c] * x[t, c] in double. The integer dot products are exact; what remains is
// the f32 rounding of the per-block scale products and the block sum, relative to the magnitude of
// the terms: sum_c |x_c| * (|w_c| + the block's min / offset magnitude), bounded by max |w| of the row x 2.
// Q4_1 / Q5_1 (mins: [rows, cols / 32] the block mins m, s32 from effective_x): each block's m * sum x
// is taken as m * s32, so the reference splits w = (w - m) + m.
void check_against_reference(const std::vector<float>& exact, const std::vector<double>& x, const std::vector<float>& y,
                             int64_t rows, int64_t cols, int64_t num_tokens, const std::vector<float>* mins = nullptr,
                             const std::vector<double>* s32 = nullptr) {
  int num_bad = 0;
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t r = 0; r < rows; ++r) {
      double sum = 0.0, wmax = 0.0, xabs = 0.0;
      for (int64_t c = 0; c < cols; ++c) {
        const double m = mins ? double((*mins)[size_t(r * (cols / 32) + c / 32)]) : 0.0;
        sum += (double(exact[size_t(r * cols + c)]) - m) * x[size_t(t * cols + c)];
        wmax = std::max(wmax, std::fabs(double(exact[size_t(r * cols + c)])));
        xabs += std::fabs(x[size_t(t * cols + c)]);
      }
      if (mins)
        for (int64_t b = 0; b < cols / 32; ++b)
          sum += double((*mins)[size_t(r * (cols / 32) + b)]) * (*s32)[size_t(t * (cols / 32) + b)];
      const double got = y[size_t(t * rows + r)];
      const double tol = 2e-6 * 2 * wmax * xabs + 1e-6;
      if (!(std::fabs(got - sum) <= tol) && ++num_bad <= 5)
        FAIL_CHECK("y[" << t << ", " << r << "] = " << got << ", want " << sum << " +- " << tol);
    }
  }
  CHECK(num_bad == 0);
}

bool has_min(DType t) { return t == DType::Q4_1 || t == DType::Q5_1; }

// The f16 min m of every 32-block of a Q4_1 / Q5_1 matrix [rows, cols / 32].
std::vector<float> block_mins(DType t, const std::vector<uint8_t>& bytes, int64_t rows, int64_t cols) {
  std::vector<float> m;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < cols / 32; ++b) {
      uint16_t h;
      std::memcpy(&h, bytes.data() + r * row_bytes(t, cols) + b * block_bytes(t) + 2, 2);
      m.push_back(f16_to_f32(h));
    }
  }
  return m;
}

// check_against_reference for matrix w of type t and activations x (as given to matmul).
void check_quant(DType t, const QuantWeights& w, const std::vector<float>& x, const std::vector<float>& y, int64_t rows,
                 int64_t cols, int64_t num_tokens) {
  std::vector<double> s32;
  const std::vector<double> x_eff = effective_x(t, x, cols, num_tokens, &s32);
  if (!has_min(t)) return check_against_reference(w.exact, x_eff, y, rows, cols, num_tokens);
  const std::vector<float> mins = block_mins(t, w.bytes, rows, cols);
  check_against_reference(w.exact, x_eff, y, rows, cols, num_tokens, &mins, &s32);
}

}  // namespace

TEST_CASE("matmul of every block format matches a dequantised double reference on every ISA, bit-identical") {
  test::IsaGuard restore;
  const std::vector<Isa> isas = test::supported_isas();
  for (DType t : kQuantDtypes) {
    for (int64_t rows : {1, 3, 17, 64}) {
      for (int64_t cols : {256, 512, 1536}) {
        const auto values = random_values(size_t(rows * cols), uint32_t(rows * 31 + cols), 0.05f);
        const QuantWeights w = quantize(t, values, rows, cols);
        const auto x = random_values(size_t(13 * cols), uint32_t(cols + 5));
        for (int64_t num_tokens : {1, 2, 3, 5, 13}) {
          std::vector<float> scalar;
          for (Isa isa : isas) {
            CAPTURE(dtype_name(t));
            CAPTURE(cpu::isa_name(isa));
            CAPTURE(rows);
            CAPTURE(cols);
            CAPTURE(num_tokens);
            REQUIRE(cpu::set_active_isa(isa));
            std::vector<float> y(size_t(num_tokens * rows), NAN);
            matmul(w.view(t, rows, cols), x.data(), y.data(), num_tokens);
            check_quant(t, w, x, y, rows, cols, num_tokens);
            if (isa == Isa::Scalar) scalar = y;
            else CHECK(std::memcmp(scalar.data(), y.data(), y.size() * 4) == 0);
          }
        }
      }
    }
  }
}

TEST_CASE("matmul of the legacy formats takes rows of 32-weight blocks") {
  test::IsaGuard restore;
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1}) {
    const int64_t rows = 9, cols = 96;
    const QuantWeights w = quantize(t, random_values(size_t(rows * cols), 3), rows, cols);
    const auto x = random_values(size_t(4 * cols), 4);
    for (Isa isa : test::supported_isas()) {
      CAPTURE(dtype_name(t));
      CAPTURE(cpu::isa_name(isa));
      REQUIRE(cpu::set_active_isa(isa));
      std::vector<float> y(size_t(4 * rows));
      matmul(w.view(t, rows, cols), x.data(), y.data(), 4);
      check_quant(t, w, x, y, rows, cols, 4);
    }
  }
}

namespace {

// Every block format on every ISA: a matmul of num_tokens tokens gives each token the bits of the token alone.
void check_each_token_alone(int64_t rows, int64_t cols, int64_t num_tokens, uint32_t seed) {
  test::IsaGuard restore;
  for (DType t : kQuantDtypes) {
    const QuantWeights w = quantize(t, random_values(size_t(rows * cols), seed), rows, cols);
    const auto x = random_values(size_t(num_tokens * cols), seed + 1);
    for (Isa isa : test::supported_isas()) {
      CAPTURE(dtype_name(t));
      CAPTURE(cpu::isa_name(isa));
      REQUIRE(cpu::set_active_isa(isa));
      std::vector<float> batch(size_t(num_tokens * rows));
      matmul(w.view(t, rows, cols), x.data(), batch.data(), num_tokens);
      for (int64_t t0 = 0; t0 < num_tokens; ++t0) {
        std::vector<float> alone(static_cast<size_t>(rows));
        matmul(w.view(t, rows, cols), x.data() + t0 * cols, alone.data(), 1);
        REQUIRE(std::memcmp(alone.data(), batch.data() + t0 * rows, size_t(rows) * 4) == 0);
      }
    }
  }
}

}  // namespace

TEST_CASE("matmul of the block formats is batch invariant") { check_each_token_alone(37, 512, 11, 5); }

TEST_CASE("a prefill of the block formats, split into token slices over the pool, keeps every bit") {
  // 150 tokens: K-quant matmuls split them into pool tasks of 48, 48 and 54 tokens; the others do not.
  check_each_token_alone(40, 512, 150, 7);
}

TEST_CASE("block-format prefill over long rows: scratch passes of fewer rows, and rows past the scratch") {
  // A prefill unpacks rows into a 64 KiB scratch (matmul_quant_int8.h run_unpacking): 16384 columns fit 3
  // rows a pass (34-36 bytes per 32 weights, 288 per 256), 65536 columns not one, which takes the direct
  // kernel. Every path gives the scalar bits and each token's bits alone.
  test::IsaGuard restore;
  const int64_t rows = 9, num_tokens = 6;
  for (int64_t cols : {16384, 65536}) {
    for (DType t : {DType::Q4_0, DType::Q5_1, DType::Q4_K, DType::Q6_K}) {
      const QuantWeights w = quantize(t, random_values(size_t(rows * cols), 7, 0.05f), rows, cols);
      const auto x = random_values(size_t(num_tokens * cols), 8);
      std::vector<float> scalar;
      for (Isa isa : test::supported_isas()) {
        CAPTURE(dtype_name(t));
        CAPTURE(cpu::isa_name(isa));
        CAPTURE(cols);
        REQUIRE(cpu::set_active_isa(isa));
        std::vector<float> batch(size_t(num_tokens * rows));
        matmul(w.view(t, rows, cols), x.data(), batch.data(), num_tokens);
        if (isa == Isa::Scalar) scalar = batch;
        else CHECK(std::memcmp(scalar.data(), batch.data(), batch.size() * 4) == 0);
        std::vector<float> alone(static_cast<size_t>(rows));
        matmul(w.view(t, rows, cols), x.data() + (num_tokens - 1) * cols, alone.data(), 1);
        CHECK(std::memcmp(alone.data(), batch.data() + (num_tokens - 1) * rows, size_t(rows) * 4) == 0);
      }
    }
  }
}

TEST_CASE("interleaved Q4_0 / Q5_0 / Q4_K / Q5_K / Q6_K give the plain matrix's bits under every ISA, alone and in any batch") {
  // The plain matrix on the scalar ISA is the reference. The interleaved one runs the 16-row VNNI kernel in
  // tiles of 2 and 1 tokens on VNNI, the scalar kernel reading it block by block elsewhere. 48 rows: three
  // groups, so a 2-thread split lands inside the second.
  test::IsaGuard restore;
  const int64_t rows = 48, num_tokens = 9;
  for (DType t : {DType::Q4_0, DType::Q5_0, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    const std::vector<int64_t> widths = is_kquant(t) ? std::vector<int64_t>{256, 768} : std::vector<int64_t>{32, 96, 576};
    for (int64_t cols : widths) {
      CAPTURE(dtype_name(t));
      CAPTURE(cols);
      QuantWeights w = quantize(t, random_values(size_t(rows * cols), uint32_t(cols + 1)), rows, cols);
      // Extreme blocks, all but the f16 scales: all nibbles 15 with every fifth bit set (Q4_K / Q5_K: every
      // 6-bit scale and min 63; Q6_K: quants 63, group scales -128), and all zero.
      const int bytes = block_bytes(t);
      uint8_t* extreme = w.bytes.data() + bytes;
      uint8_t* zero = w.bytes.data() + 5 * row_bytes(t, cols);
      if (t == DType::Q6_K) {  // ql, qh, scales, then d
        std::memset(extreme, 0xff, 192);
        std::memset(extreme + 192, 0x80, 16);
        std::memset(zero, 0, 208);
      } else {
        const int scales = is_kquant(t) ? 4 : 2;
        std::memset(extreme + scales, 0xff, size_t(bytes - scales));
        std::memset(zero + scales, 0, size_t(bytes - scales));
      }
      const WeightMatrix plain = w.view(t, rows, cols);
      std::vector<uint8_t> inter_bytes(w.bytes.size());
      const WeightMatrix inter = interleave_rows(plain, inter_bytes.data());
      REQUIRE(inter.interleaved);
      auto x = random_values(size_t(num_tokens * cols), uint32_t(cols + 2));
      x[1] = 25.0f;  // an outlier
      REQUIRE(cpu::set_active_isa(Isa::Scalar));
      std::vector<float> want(size_t(num_tokens * rows));
      matmul(plain, x.data(), want.data(), num_tokens);
      for (Isa isa : test::supported_isas()) {
        CAPTURE(cpu::isa_name(isa));
        REQUIRE(cpu::set_active_isa(isa));
        // Batches of 1 .. 4 tokens (the direct kernel) and of 5 .. 9 (unpacked), from every start.
        for (int64_t n = 1; n <= num_tokens; ++n) {
          for (int64_t t0 = 0; t0 + n <= num_tokens; t0 += std::max<int64_t>(1, n - 1)) {
            std::vector<float> y(size_t(n * rows));
            matmul(inter, x.data() + t0 * cols, y.data(), n);
            CAPTURE(n);
            CAPTURE(t0);
            REQUIRE(std::memcmp(y.data(), want.data() + t0 * rows, y.size() * 4) == 0);
          }
        }
      }
      // Rows read back from the interleaved layout are the plain rows; interleaving in place gives the
      // same bytes as into a second buffer.
      std::vector<float> a(static_cast<size_t>(cols)), b(a.size());
      for (int64_t r = 0; r < rows; ++r) {
        matrix_row(plain, r, a.data());
        matrix_row(inter, r, b.data());
        REQUIRE(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
      }
      std::vector<uint8_t> in_place = w.bytes;
      interleave_rows(WeightMatrix{t, in_place.data(), rows, cols}, in_place.data());
      CHECK(in_place == inter_bytes);
    }
  }
}

TEST_CASE("a matmul group of one input gives each matrix's bits alone, with mixed activation formats") {
  // Q4_K and Q6_K share the Q8_K activations, Q5_0 takes Q8_0 blocks with f16 scales, Q8_0 its own, F16 none;
  // row counts that are not multiples of the 8-row block put task boundaries inside a matrix and across two.
  test::IsaGuard restore;
  const int64_t cols = 512;
  const DType types[] = {DType::Q4_K, DType::Q5_0, DType::Q6_K, DType::Q8_0, DType::F16};
  const int64_t rows[] = {37, 21, 64, 9, 13};
  std::vector<QuantWeights> ws;
  for (size_t i = 0; i < 5; ++i) {
    const auto values = random_values(size_t(rows[i] * cols), uint32_t(11 + i), 0.05f);
    if (types[i] == DType::F16) {
      QuantWeights w;
      w.bytes.resize(size_t(rows[i] * cols * 2));
      for (size_t k = 0; k < values.size(); ++k) {
        const uint16_t h = f32_to_f16(values[k]);
        std::memcpy(&w.bytes[2 * k], &h, 2);
      }
      ws.push_back(std::move(w));
    } else {
      ws.push_back(quantize(types[i], values, rows[i], cols));
    }
  }
  for (Isa isa : test::supported_isas()) {
    REQUIRE(cpu::set_active_isa(isa));
    for (int64_t num_tokens : {1, 7}) {
      const auto x = random_values(size_t(num_tokens * cols), 12);
      // Groups: the first three (Q, K, V-like), and the last two.
      for (auto [first, count] : {std::pair<size_t, size_t>{0, 3}, {3, 2}}) {
        CAPTURE(cpu::isa_name(isa));
        CAPTURE(num_tokens);
        CAPTURE(first);
        std::vector<WeightMatrix> mats;
        std::vector<std::vector<float>> grouped, alone;
        for (size_t i = first; i < first + count; ++i) {
          mats.push_back(ws[i].view(types[i], rows[i], cols));
          grouped.emplace_back(size_t(num_tokens * rows[i]), NAN);
          alone.emplace_back(size_t(num_tokens * rows[i]), NAN);
        }
        std::vector<MatmulTarget> targets;
        for (size_t k = 0; k < count; ++k) targets.push_back({&mats[k], grouped[k].data()});
        matmul(targets, x.data(), num_tokens);
        for (size_t k = 0; k < count; ++k) {
          matmul(mats[k], x.data(), alone[k].data(), num_tokens);
          CHECK(std::memcmp(alone[k].data(), grouped[k].data(), alone[k].size() * 4) == 0);
        }
      }
    }
  }
}

TEST_CASE("matmul of the block formats differs from f32 math by at most the activation rounding") {
  // |x - xd * xq| <= xd / 2 per element (xd = block amax / 127), so |y - sum w x| <= sum_b xd_b / 2 * sum_{c in b} |w_c|
  // plus the f16 rounding of the legacy formats' activation scales and the f32 rounding; an outlier coarsens
  // its block's step.
  test::IsaGuard restore;
  const int64_t rows = 16, cols = 1024, num_tokens = 2;
  for (DType t : kQuantDtypes) {
    const int block = cpu::activation_block_size(t);
    const QuantWeights w = quantize(t, random_values(size_t(rows * cols), 8, 0.05f), rows, cols);
    auto x = random_values(size_t(num_tokens * cols), 9);
    x[70] = 30.0f;
    for (Isa isa : test::supported_isas()) {
      CAPTURE(dtype_name(t));
      CAPTURE(cpu::isa_name(isa));
      REQUIRE(cpu::set_active_isa(isa));
      std::vector<float> y(size_t(num_tokens * rows));
      matmul(w.view(t, rows, cols), x.data(), y.data(), num_tokens);
      for (int64_t t0 = 0; t0 < num_tokens; ++t0) {
        for (int64_t r = 0; r < rows; ++r) {
          double exact = 0, bound = 0, sum_abs = 0;
          for (int64_t b = 0; b < cols / block; ++b) {
            double amax = 0, wsum = 0, wmax = 0, xsum = 0;
            for (int i = 0; i < block; ++i) {
              const int64_t c = b * block + i;
              const double wc = w.exact[size_t(r * cols + c)], xc = x[size_t(t0 * cols + c)];
              exact += wc * xc;
              sum_abs += std::fabs(wc * xc);
              amax = std::max(amax, std::fabs(xc));
              wsum += std::fabs(wc);
              wmax = std::max(wmax, std::fabs(wc));
              xsum += std::fabs(xc);
            }
            // legacy: the step is kept as f16 (relative 2^-11), moving |q| <= 127 steps by 127 * 2^-11 of one;
            // Q4_1 / Q5_1: m * step * sum q, also rounded to f16.
            const double f16_part = block == 32 ? 127.0 / 2048.0 : 0.0;
            bound += (0.5 + f16_part) * amax / 127.0 * wsum;
            if (has_min(t)) bound += wmax * 1.01 * xsum / 2048.0;
          }
          CHECK(std::fabs(y[size_t(t0 * rows + r)] - exact) <= bound * 1.0001 + 1e-5 * sum_abs);
        }
      }
    }
  }
}

TEST_CASE("matmul of the block formats takes extreme quants: all nibbles 15, Q6_K scales -128") {
  test::IsaGuard restore;
  const int64_t rows = 3, cols = 512;
  const auto x = random_values(size_t(cols), 10);
  for (DType t : kQuantDtypes) {
    std::vector<uint8_t> bytes(size_t(rows * row_bytes(t, cols)), 0xff);
    // keep the f16 scales finite: every block's f16 fields set to small values
    const int bb = block_bytes(t);
    for (size_t off = 0; off < bytes.size(); off += size_t(bb)) {
      const uint16_t h = f32_to_f16(t == DType::Q6_K ? 1e-4f : 1e-3f);
      if (t == DType::Q6_K) std::memcpy(&bytes[off + 208], &h, 2);
      else std::memcpy(&bytes[off], &h, 2);
      if (t == DType::Q4_1 || t == DType::Q5_1 || t == DType::Q4_K || t == DType::Q5_K) std::memcpy(&bytes[off + 2], &h, 2);
      if (t == DType::Q6_K) for (int g = 0; g < 16; ++g) bytes[off + 192 + size_t(g)] = 0x80;  // -128
    }
    QuantWeights w;
    w.bytes = bytes;
    w.exact.resize(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r) dequantize_row(t, bytes.data() + r * row_bytes(t, cols), w.exact.data() + r * cols, cols);
    std::vector<float> scalar;
    for (Isa isa : test::supported_isas()) {
      CAPTURE(dtype_name(t));
      CAPTURE(cpu::isa_name(isa));
      REQUIRE(cpu::set_active_isa(isa));
      std::vector<float> y(static_cast<size_t>(rows));
      matmul({t, bytes.data(), rows, cols}, x.data(), y.data(), 1);
      check_quant(t, w, x, y, rows, cols, 1);
      if (isa == Isa::Scalar) scalar = y;
      else CHECK(std::memcmp(scalar.data(), y.data(), y.size() * 4) == 0);
    }
  }
}

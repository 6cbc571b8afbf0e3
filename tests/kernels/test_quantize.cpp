// The GGML block formats Q4_0 .. Q6_K: dequantize_row on hand-built blocks whose values are worked out
// by hand from the format's definition, and quantize_row's round trip.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "kernels/dtype.h"

namespace {

using namespace inflight::kernels;

void put_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

std::vector<float> dequantized(DType t, const std::vector<uint8_t>& bytes, int64_t n) {
  REQUIRE(int64_t(bytes.size()) == row_bytes(t, n));
  std::vector<float> out(static_cast<size_t>(n));
  dequantize_row(t, bytes.data(), out.data(), n);
  return out;
}

// The 12 scale bytes used below; sub-block (scale, min): 0 (1, 5), 1 (2, 6), 4 (26, 9), 5 (44, 27), 7 (49, 15).
constexpr uint8_t kScaleBytes[12] = {0x41, 0x82, 0x03, 0xC4, 0x05, 0x46, 0x87, 0x08, 0x9A, 0xBC, 0xDE, 0xF1};

}  // namespace

TEST_CASE("block sizes and row bytes are GGML's") {
  CHECK(row_bytes(DType::Q4_0, 64) == 36);
  CHECK(row_bytes(DType::Q4_1, 64) == 40);
  CHECK(row_bytes(DType::Q5_0, 64) == 44);
  CHECK(row_bytes(DType::Q5_1, 64) == 48);
  CHECK(row_bytes(DType::Q4_K, 512) == 288);
  CHECK(row_bytes(DType::Q5_K, 512) == 352);
  CHECK(row_bytes(DType::Q6_K, 512) == 420);
  CHECK(block_size(DType::Q6_K) == 256);
  CHECK(block_size(DType::Q5_1) == 32);
}

TEST_CASE("kquant_scale_min unpacks the 6-bit scales and mins") {
  const int want[8][2] = {{1, 5}, {2, 6}, {3, 7}, {4, 8}, {26, 9}, {44, 27}, {14, 45}, {49, 15}};
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    kquant_scale_min(j, kScaleBytes, sc, m);
    CAPTURE(j);
    CHECK(sc == want[j][0]);
    CHECK(m == want[j][1]);
  }
}

TEST_CASE("dequantize_row: legacy blocks by hand") {
  SUBCASE("q4_0: d * (nibble - 8)") {
    std::vector<uint8_t> b(18, 0x3A);  // low nibble 10, high 3
    put_f16(b.data(), 0.5f);
    const auto v = dequantized(DType::Q4_0, b, 32);
    CHECK(v[0] == 1.0f);
    CHECK(v[15] == 1.0f);
    CHECK(v[16] == -2.5f);
    CHECK(v[31] == -2.5f);
  }
  SUBCASE("q4_1: d * nibble + m") {
    std::vector<uint8_t> b(20, 0x3A);
    put_f16(b.data(), 0.5f);
    put_f16(b.data() + 2, -1.0f);
    const auto v = dequantized(DType::Q4_1, b, 32);
    CHECK(v[0] == 4.0f);
    CHECK(v[16] == 0.5f);
  }
  SUBCASE("q5_0: fifth bit i of qh, d * (q - 16)") {
    std::vector<uint8_t> b(22, 0x3A);
    put_f16(b.data(), 0.5f);
    const uint32_t qh = 0x00010001;  // elements 0 and 16
    std::memcpy(b.data() + 2, &qh, 4);
    const auto v = dequantized(DType::Q5_0, b, 32);
    CHECK(v[0] == 5.0f);
    CHECK(v[1] == -3.0f);
    CHECK(v[16] == 1.5f);
    CHECK(v[17] == -6.5f);
  }
  SUBCASE("q5_1: d * q + m") {
    std::vector<uint8_t> b(24, 0x3A);
    put_f16(b.data(), 0.5f);
    put_f16(b.data() + 2, -1.0f);
    const uint32_t qh = 0x00010001;
    std::memcpy(b.data() + 4, &qh, 4);
    const auto v = dequantized(DType::Q5_1, b, 32);
    CHECK(v[0] == 12.0f);
    CHECK(v[1] == 4.0f);
    CHECK(v[16] == 8.5f);
    CHECK(v[17] == 0.5f);
  }
}

TEST_CASE("dequantize_row: k-quant super-blocks by hand") {
  SUBCASE("q4_k: (d * sc) * q - dmin * m, sub-block pairs share qs bytes") {
    std::vector<uint8_t> b(144, 0x3A);
    put_f16(b.data(), 1.0f);
    put_f16(b.data() + 2, 0.5f);
    std::memcpy(b.data() + 4, kScaleBytes, 12);
    const auto v = dequantized(DType::Q4_K, b, 256);
    CHECK(v[0] == 7.5f);      // 1 * 10 - 0.5 * 5
    CHECK(v[32] == 3.0f);     // 2 * 3 - 0.5 * 6
    CHECK(v[128] == 255.5f);  // 26 * 10 - 0.5 * 9
    CHECK(v[160] == 118.5f);  // 44 * 3 - 0.5 * 27
    CHECK(v[255] == 139.5f);  // 49 * 3 - 0.5 * 15
  }
  SUBCASE("q5_k: bit j of qh[l] is the fifth bit of sub-block j") {
    std::vector<uint8_t> b(176, 0x3A);
    put_f16(b.data(), 1.0f);
    put_f16(b.data() + 2, 0.5f);
    std::memcpy(b.data() + 4, kScaleBytes, 12);
    std::memset(b.data() + 16, 0x91, 32);  // bits 0, 4, 7
    const auto v = dequantized(DType::Q5_K, b, 256);
    CHECK(v[0] == 23.5f);     // 1 * 26 - 2.5
    CHECK(v[32] == 3.0f);
    CHECK(v[128] == 671.5f);  // 26 * 26 - 4.5
    CHECK(v[160] == 118.5f);
    CHECK(v[255] == 923.5f);  // 49 * 19 - 7.5
  }
  SUBCASE("q6_k: (d * sc[g]) * (q - 32), 4 + 2 bits") {
    std::vector<uint8_t> b(210);
    std::memset(b.data(), 0x5C, 128);        // ql: low nibble 12, high 5
    std::memset(b.data() + 128, 0xE4, 64);   // qh: bit pairs 0, 1, 2, 3 for k = 0..3
    for (int g = 0; g < 16; ++g) b[size_t(192 + g)] = uint8_t(int8_t(g - 8));
    put_f16(b.data() + 208, 0.5f);
    const auto v = dequantized(DType::Q6_K, b, 256);
    CHECK(v[0] == 80.0f);    // 0.5 * -8 * (12 - 32)
    CHECK(v[40] == 12.0f);   // group 2: 0.5 * -6 * (28 - 32)
    CHECK(v[80] == -7.5f);   // group 5: 0.5 * -3 * (37 - 32)
    CHECK(v[130] == 0.0f);   // group 8: scale 0
    CHECK(v[255] == 73.5f);  // group 15: 0.5 * 7 * (53 - 32)
  }
}

TEST_CASE("quantize_row round-trips every block format within its step") {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(1024);
  for (float& f : x) f = dist(rng);
  for (int i = 0; i < 32; ++i) x[size_t(320 + i)] = 0.0f;  // an all-zero block (sub-block)
  x[700] = 9.0f;                                             // an outlier
  struct Case {
    DType t;
    double max_rms;  // expected rms error for unit normal weights, with margin
  };
  for (const Case c : {Case{DType::Q4_0, 0.13}, Case{DType::Q4_1, 0.12}, Case{DType::Q5_0, 0.07},
                       Case{DType::Q5_1, 0.06}, Case{DType::Q4_K, 0.13}, Case{DType::Q5_K, 0.07},
                       Case{DType::Q6_K, 0.035}, Case{DType::Q8_0, 0.01}}) {
    CAPTURE(dtype_name(c.t));
    std::vector<uint8_t> q(size_t(row_bytes(c.t, 1024)));
    quantize_row(c.t, x.data(), q.data(), 1024);
    std::vector<float> back(1024);
    dequantize_row(c.t, q.data(), back.data(), 1024);
    double se = 0;
    for (size_t i = 0; i < x.size(); ++i) se += double(back[i] - x[i]) * (back[i] - x[i]);
    CHECK(std::sqrt(se / 1024) <= c.max_rms);
    for (int i = 0; i < 32; ++i) CHECK(back[size_t(320 + i)] == 0.0f);
  }
}

TEST_CASE("quantize_row refuses a length that is not a multiple of the block") {
  std::vector<float> x(288, 1.0f);
  std::vector<uint8_t> q(1024);
  CHECK_THROWS_AS(quantize_row(DType::Q4_K, x.data(), q.data(), 288), std::invalid_argument);
  CHECK_THROWS_AS(quantize_row(DType::F16, x.data(), q.data(), 288), std::invalid_argument);
  CHECK_NOTHROW(quantize_row(DType::Q4_0, x.data(), q.data(), 288));
}

// Weight element types and the scalar conversions every backend shares.
#pragma once
#include "kernels/host_device.h"
#include <cstdint>
#include <cstring>
#include <string_view>

namespace inflight::kernels {

// Element type of a weight tensor. Q8_0 is GGML's block format: blocks of 32 weights, each
// { f16 scale d; int8 q[32] } (34 bytes), value = d * q.
enum class DType : uint8_t { F32, F16, BF16, Q8_0 };

inline constexpr int kQ8BlockSize = 32;      // weights per Q8_0 block
inline constexpr int kQ8BlockBytes = 2 + 32; // f16 scale + 32 int8

std::string_view dtype_name(DType t);

// Bytes taken by one row of `n` elements (n a multiple of 32 for Q8_0).
inline int64_t row_bytes(DType t, int64_t n) {
  switch (t) {
    case DType::F32: return n * 4;
    case DType::F16:
    case DType::BF16: return n * 2;
    case DType::Q8_0: return n / kQ8BlockSize * kQ8BlockBytes;
  }
  return 0;
}

// IEEE half <-> float, round-to-nearest-even, handles subnormals, inf and nan.
INFLIGHT_HD inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      int e = -1;
      uint32_t m = mant;
      do { ++e; m <<= 1; } while ((m & 0x400) == 0);
      bits = sign | uint32_t(127 - 15 - e) << 23 | (m & 0x3ff) << 13;
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | mant << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

INFLIGHT_HD inline uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000;
  const uint32_t abs = x & 0x7fffffff;
  if (abs >= 0x7f800000u) return uint16_t(sign | 0x7c00 | (abs > 0x7f800000u ? 0x200 : 0));  // inf / nan
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00);  // rounds past 65504: inf
  if (abs < 0x38800000u) {  // result is subnormal or zero
    if (abs < 0x33000000u) return uint16_t(sign);
    const uint32_t e = abs >> 23;
    const uint32_t m = (abs & 0x7fffff) | 0x800000;
    const uint32_t shift = 126 - e;  // 14 + (113 - e)
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) ++r;
    return uint16_t(sign | r);
  }
  uint32_t r = ((abs >> 13) - (112u << 10));
  const uint32_t rem = abs & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) ++r;
  return uint16_t(sign | r);
}

INFLIGHT_HD inline float bf16_to_f32(uint16_t h) {
  const uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

INFLIGHT_HD inline uint16_t f32_to_bf16(float f) {  // round-to-nearest-even, nan stays nan
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffff) > 0x7f800000u) return uint16_t((x >> 16) | 0x40);
  return uint16_t((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

// Expands one row of `n` elements of type `t` to float32.
void dequantize_row(DType t, const void* src, float* dst, int64_t n);

// Quantises `n` floats (a multiple of 32) to Q8_0 blocks as GGML does: d = amax / 127 stored as f16,
// q = round(x * (1 / d)) (ties away from zero). dst: n / 32 * kQ8BlockBytes bytes.
void quantize_row_q8_0(const float* src, void* dst, int64_t n);

}  // namespace inflight::kernels

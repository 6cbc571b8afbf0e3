// Weight element types and the scalar conversions every backend shares.
#pragma once
#include "kernels/host_device.h"
#include <cstdint>
#include <cstring>
#include <string_view>

namespace inflight::kernels {

// Element type of a weight tensor. The quantised ones are GGML's block formats, byte for byte
// (all little-endian; f16 = IEEE half). Legacy formats, blocks of 32 weights, element i of block:
//   Q8_0 { f16 d; int8 q[32] }                       34 B   d * q[i]
//   Q4_0 { f16 d; u8 qs[16] }                        18 B   d * (nib(i) - 8)
//   Q4_1 { f16 d; f16 m; u8 qs[16] }                 20 B   d * nib(i) + m
//   Q5_0 { f16 d; u32 qh; u8 qs[16] }                22 B   d * ((nib(i) | bit(qh, i) << 4) - 16)
//   Q5_1 { f16 d; f16 m; u32 qh; u8 qs[16] }         24 B   d * (nib(i) | bit(qh, i) << 4) + m
//   nib(i) = qs[i] & 15 for i < 16, qs[i - 16] >> 4 for i >= 16.
// K-quants, super-blocks of 256 weights:
//   Q4_K { f16 d; f16 dmin; u8 scales[12]; u8 qs[128] }             144 B
//   Q5_K { f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128] }  176 B
//     8 sub-blocks j of 32 with 6-bit scale sc[j] and min m[j] packed in scales[12] (kquant_scale_min);
//     value = (d * sc[j]) * q - dmin * m[j]; q: 4 bits (Q4_K) or 4 + 1 bits (Q5_K), the layout in dtype.cpp.
//   Q6_K { u8 ql[128]; u8 qh[64]; int8 scales[16]; f16 d }         210 B
//     16 sub-blocks of 16 with int8 scales; value = (d * scales[g]) * (q - 32), q: 4 + 2 bits.
enum class DType : uint8_t { F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K };

inline constexpr int kQ8BlockSize = 32;      // weights per Q8_0 block
inline constexpr int kQ8BlockBytes = 2 + 32; // f16 scale + 32 int8
inline constexpr int kQkBlockSize = 256;     // weights per K-quant super-block

std::string_view dtype_name(DType t);

inline bool is_kquant(DType t) { return t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K; }
// Q4_0 .. Q5_1: the legacy 32-weight formats other than Q8_0.
inline bool is_legacy_quant(DType t) {
  return t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q5_0 || t == DType::Q5_1;
}

// Weights per block: 1 for float types, 32 for Q8_0 / Q4_0 .. Q5_1, 256 for the K-quants.
inline int block_size(DType t) {
  switch (t) {
    case DType::F32:
    case DType::F16:
    case DType::BF16: return 1;
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K: return kQkBlockSize;
    default: return 32;
  }
}

// Bytes per block (per element for float types).
inline int block_bytes(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16:
    case DType::BF16: return 2;
    case DType::Q8_0: return kQ8BlockBytes;
    case DType::Q4_0: return 18;
    case DType::Q4_1: return 20;
    case DType::Q5_0: return 22;
    case DType::Q5_1: return 24;
    case DType::Q4_K: return 144;
    case DType::Q5_K: return 176;
    case DType::Q6_K: return 210;
  }
  return 0;
}

// Bytes taken by one row of `n` elements (n a multiple of block_size(t)).
inline int64_t row_bytes(DType t, int64_t n) { return n / block_size(t) * block_bytes(t); }

// Sub-block j (0..7) scale and min of a Q4_K / Q5_K super-block, unpacked from its 12 scale bytes:
// j < 4: low 6 bits of s[j] and s[j + 4]; j >= 4: low / high nibble of s[j + 4] with the top two
// bits of s[j - 4] / s[j] above them.
inline void kquant_scale_min(int j, const uint8_t* s, int& scale, int& min) {
  if (j < 4) {
    scale = s[j] & 63;
    min = s[j + 4] & 63;
  } else {
    scale = (s[j + 4] & 0xf) | (s[j - 4] >> 6) << 4;
    min = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
  }
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

// Quantises `n` floats (a multiple of block_size(t)) to the block format `t` (any quantised DType):
// kernels/quantize.cpp. dst: row_bytes(t, n) bytes.
void quantize_row(DType t, const float* src, void* dst, int64_t n);

}  // namespace inflight::kernels

// KV cache storage types. The one place that says how a K/V value is stored and read back: the append
// path, every attention backend (scalar and SIMD) and the tests all follow these formulas.
//
//   dtype        stored element        value read back                      scale
//   F32          float                 x                                    -
//   F16          IEEE half (RNE)       x                                    -
//   BF16         bfloat16 (RNE)        x                                    -
//   Int8         int8 in [-127, 127]   q * s[token, head, group]            s = amax(group) / 127, one f32 per
//                                                                           (token, KV head, quant_group channels)
//   Int8Static   int8 in [-127, 127]   q * quant_orig                       per tensor (TensorRT-LLM's
//   Fp8E4M3      OCP e4m3fn code       fp8(code) * quant_orig                kv_orig_quant_scale / kv_quant_orig_scale):
//   Fp8E5M2      OCP e5m2 code         fp8(code) * quant_orig                q = quantize(x * orig_quant)
//
// Quantization is symmetric and saturating: int8 clamps to +-127, fp8 to its largest finite value (448 for
// e4m3, 57344 for e5m2); rounding is to nearest, ties to even. fp8 NaN codes are never written.
#pragma once
#include "kernels/host_device.h"
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "kernels/dtype.h"

namespace inflight::kernels {

enum class KvDType : uint8_t { F32, F16, BF16, Int8, Int8Static, Fp8E4M3, Fp8E5M2 };

inline constexpr KvDType kAllKvDTypes[] = {KvDType::F32,  KvDType::F16,        KvDType::BF16,   KvDType::Int8,
                                           KvDType::Int8Static, KvDType::Fp8E4M3, KvDType::Fp8E5M2};

inline constexpr float kInt8Max = 127.0f;       // int8 codes are symmetric: [-127, 127]
inline constexpr float kFp8E4M3Max = 448.0f;    // largest finite e4m3fn value
inline constexpr float kFp8E5M2Max = 57344.0f;  // largest finite e5m2 value
// An e4m3 code read as the f16 bit pattern fp8_e4m3_to_f16_bits(code) is the fp8 value / 256.
inline constexpr float kFp8E4M3ViaF16Scale = 256.0f;

INFLIGHT_HD inline int kv_elem_bytes(KvDType t) {
  switch (t) {
    case KvDType::F32: return 4;
    case KvDType::F16:
    case KvDType::BF16: return 2;
    default: return 1;
  }
}
// Int8: one f32 scale per (token, KV head, group of quant_group channels), stored beside the cache.
INFLIGHT_HD inline bool kv_has_group_scales(KvDType t) { return t == KvDType::Int8; }
// Int8Static / Fp8*: one per-tensor scale pair (orig_quant, quant_orig).
INFLIGHT_HD inline bool kv_has_static_scale(KvDType t) {
  return t == KvDType::Int8Static || t == KvDType::Fp8E4M3 || t == KvDType::Fp8E5M2;
}
// Largest magnitude a quantized code holds (0 for the float types).
inline float kv_qmax(KvDType t) {
  switch (t) {
    case KvDType::Int8:
    case KvDType::Int8Static: return kInt8Max;
    case KvDType::Fp8E4M3: return kFp8E4M3Max;
    case KvDType::Fp8E5M2: return kFp8E5M2Max;
    default: return 0.0f;
  }
}
// Per-tensor dequantization scale (kv_quant_orig_scale) that maps |x| <= amax onto the full code range;
// orig_quant = 1 / quant_orig. amax <= 0 gives 1.
inline float kv_static_scale_for_amax(KvDType t, float amax) {
  return amax > 0.0f && kv_qmax(t) > 0.0f ? amax / kv_qmax(t) : 1.0f;
}

// "f32"/"fp32"/"float32"/"auto", "f16"/"fp16"/"float16"/"half", "bf16"/"bfloat16", "int8" (grouped
// scales), "int8-static" (per-tensor scale), "fp8"/"fp8-e4m3"/"e4m3", "fp8-e5m2"/"e5m2"; '_' may
// replace '-'. The single parser of KV dtype names (CLI and server flags). False for anything else.
bool parse_kv_dtype(std::string_view s, KvDType* out);
std::string_view kv_dtype_name(KvDType t);
// The accepted names, for error messages: "f32, f16, bf16, int8, int8-static, fp8-e4m3, fp8-e5m2".
std::string_view kv_dtype_names();

// ---- int8 ----

// round(x * orig_quant) clamped to [-127, 127]; NaN gives 0.
INFLIGHT_HD inline int8_t quantize_int8(float x, float orig_quant) {
  const float r = std::nearbyint(x * orig_quant);
  if (!(r > -kInt8Max)) return r != r ? int8_t(0) : int8_t(-127);
  return r < kInt8Max ? int8_t(r) : int8_t(127);
}

// ---- fp8 (OCP 8-bit floating point: e4m3fn bias 7, no infinities; e5m2 bias 15, IEEE-like) ----

namespace detail {
template <int kManBits, int kBias, uint32_t kMaxCode>
INFLIGHT_HD inline uint8_t f32_to_fp8(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  const uint8_t sign = uint8_t((bits >> 24) & 0x80);
  const float a = std::fabs(x);
  if (a != a) return uint8_t(sign | 0x7f);  // NaN in both formats
  constexpr float kMinNormal = 1.0f / float(1u << (kBias - 1));
  if (a < kMinNormal) {  // subnormal: multiples of 2^(1 - bias - man_bits); 2^man_bits is the min normal code
    const float q = std::nearbyint(a * float(1u << (kBias - 1 + kManBits)));
    return uint8_t(sign | uint32_t(q));
  }
  uint32_t b = bits & 0x7fffffffu;
  if (b >= 0x7f800000u) return uint8_t(sign | kMaxCode);  // inf saturates
  constexpr int kShift = 23 - kManBits;
  b += ((1u << (kShift - 1)) - 1) + ((b >> kShift) & 1);  // round the dropped mantissa bits to nearest even
  const uint32_t exp = (b >> 23) - 127 + kBias;
  uint32_t code = (exp << kManBits) | ((b >> kShift) & ((1u << kManBits) - 1));
  if (code > kMaxCode) code = kMaxCode;
  return uint8_t(sign | code);
}
}  // namespace detail

INFLIGHT_HD inline uint8_t f32_to_fp8_e4m3(float x) { return detail::f32_to_fp8<3, 7, 0x7e>(x); }
INFLIGHT_HD inline uint8_t f32_to_fp8_e5m2(float x) { return detail::f32_to_fp8<2, 15, 0x7b>(x); }

// The f16 bit pattern whose value is the e4m3 value / 256 (exact for every non-NaN code); SIMD paths
// widen codes this way and fold the 256 into the per-tensor scale.
INFLIGHT_HD inline uint16_t fp8_e4m3_to_f16_bits(uint8_t c) { return uint16_t(((c & 0x80u) << 8) | ((c & 0x7fu) << 7)); }
INFLIGHT_HD inline float fp8_e4m3_to_f32(uint8_t c) {
  if ((c & 0x7f) == 0x7f) return NAN;
  return f16_to_f32(fp8_e4m3_to_f16_bits(c)) * kFp8E4M3ViaF16Scale;
}
// e5m2 is the upper byte of an f16.
INFLIGHT_HD inline float fp8_e5m2_to_f32(uint8_t c) { return f16_to_f32(uint16_t(c << 8)); }
// The bf16 bit pattern of the value of an e4m3 (e5m2 = false) or e5m2 code: exact, as bf16 holds every fp8
// value; the AVX-512 BF16 tile routine looks codes up in a table of these.
inline uint16_t fp8_to_bf16_bits(bool e5m2, uint8_t c) {
  const float x = e5m2 ? fp8_e5m2_to_f32(c) : fp8_e4m3_to_f32(c);
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  return uint16_t(bits >> 16);
}
// fp8_to_bf16_bits of codes 0-127 as 128 high bytes, then 128 low bytes (64-byte aligned). Built here, in
// plain code: an ISA file that called the inline formulas above could emit its own (AVX-512) copies of them
// for the linker to pick for every caller.
const uint8_t* fp8_bf16_table(bool e5m2);

// ---- rows ----

// Scales of one stored row: group scales (Int8) or the per-tensor pair (Int8Static, Fp8*).
struct KvRowScales {
  float* group = nullptr;       // [n / quant_group] Int8 dequant scales (written by quantize, read by dequantize)
  int quant_group = 0;          // channels per group scale; divides n
  float orig_quant = 1.0f;      // per-tensor: code = quantize(x * orig_quant)
  float quant_orig = 1.0f;      // per-tensor: x = value(code) * quant_orig
};

// Stores x[0, n) as one row of dtype t at dst (Int8: also writes the row's group scales).
INFLIGHT_HD inline void kv_quantize_row(KvDType t, const float* x, int n, void* dst, const KvRowScales& s) {
  switch (t) {
    case KvDType::F32: std::memcpy(dst, x, size_t(n) * 4); return;
    case KvDType::F16:
      for (int i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = f32_to_f16(x[i]);
      return;
    case KvDType::BF16:
      for (int i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = f32_to_bf16(x[i]);
      return;
    case KvDType::Int8:
      for (int g = 0; g * s.quant_group < n; ++g) {
        const float* xg = x + g * s.quant_group;
        float amax = 0.0f;
        for (int i = 0; i < s.quant_group; ++i) amax = std::fmax(amax, std::fabs(xg[i]));
        s.group[g] = amax / kInt8Max;
        const float inv = amax > 0.0f ? kInt8Max / amax : 0.0f;
        for (int i = 0; i < s.quant_group; ++i)
          static_cast<int8_t*>(dst)[g * s.quant_group + i] = quantize_int8(xg[i], inv);
      }
      return;
    case KvDType::Int8Static:
      for (int i = 0; i < n; ++i) static_cast<int8_t*>(dst)[i] = quantize_int8(x[i], s.orig_quant);
      return;
    case KvDType::Fp8E4M3:
      for (int i = 0; i < n; ++i) static_cast<uint8_t*>(dst)[i] = f32_to_fp8_e4m3(x[i] * s.orig_quant);
      return;
    case KvDType::Fp8E5M2:
      for (int i = 0; i < n; ++i) static_cast<uint8_t*>(dst)[i] = f32_to_fp8_e5m2(x[i] * s.orig_quant);
      return;
  }
}

// Element i of a stored row, as a float (the value attention uses).
INFLIGHT_HD inline float kv_dequantize(KvDType t, const void* row, int i, const KvRowScales& s) {
  switch (t) {
    case KvDType::F32: return static_cast<const float*>(row)[i];
    case KvDType::F16: return f16_to_f32(static_cast<const uint16_t*>(row)[i]);
    case KvDType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(row)[i]);
    case KvDType::Int8: return float(static_cast<const int8_t*>(row)[i]) * s.group[i / s.quant_group];
    case KvDType::Int8Static: return float(static_cast<const int8_t*>(row)[i]) * s.quant_orig;
    case KvDType::Fp8E4M3: return fp8_e4m3_to_f32(static_cast<const uint8_t*>(row)[i]) * s.quant_orig;
    case KvDType::Fp8E5M2: return fp8_e5m2_to_f32(static_cast<const uint8_t*>(row)[i]) * s.quant_orig;
  }
  return 0.0f;
}

INFLIGHT_HD inline void kv_dequantize_row(KvDType t, const void* row, int n, float* out, const KvRowScales& s) {
  for (int i = 0; i < n; ++i) out[i] = kv_dequantize(t, row, i, s);
}

}  // namespace inflight::kernels

// Quantisers for the GGML block formats (layouts in dtype.h). Simple round-to-nearest schemes: each
// block's scale maps its largest magnitude (or its min..max range) onto the quant range, then every
// weight takes the nearest level under the stored (f16 / 6-bit / int8) scale, so what is stored is
// what dequantize_row reads back. Used by make-model and the tests, never on a hot path.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/dtype.h"

namespace inflight::kernels {
namespace {

void store_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

float rounded_f16(float v) { return f16_to_f32(f32_to_f16(v)); }

int clamp_round(float v, int lo, int hi) { return std::clamp(int(std::lround(v)), lo, hi); }

// The value of largest magnitude, with its sign.
float signed_absmax(const float* x, int n) {
  float best = 0.0f;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > std::fabs(best)) best = x[i];
  return best;
}

// Stores quants q[32] (< 16, or < 32 with the fifth bits) as nibbles qs[16] (+ qh bits).
void pack_legacy(const int q[32], uint8_t* qs, uint8_t* qh) {
  uint32_t high = 0;
  for (int i = 0; i < 16; ++i) {
    qs[i] = uint8_t((q[i] & 0xf) | (q[i + 16] & 0xf) << 4);
    high |= uint32_t(q[i] >> 4 & 1) << i | uint32_t(q[i + 16] >> 4 & 1) << (i + 16);
  }
  if (qh) std::memcpy(qh, &high, 4);
}

// Q4_0 / Q5_0: symmetric, d = -(signed absmax) / 2^(bits-1), so the extreme weight lands exactly on
// the end of the range that has one more level (-8 of -8..7).
void quantize_symmetric(int bits, const float* x, uint8_t* blk) {
  const int offset = 1 << (bits - 1);
  const float d = rounded_f16(-signed_absmax(x, 32) / float(offset));
  const float inv = d != 0.0f ? 1.0f / d : 0.0f;
  store_f16(blk, d);
  int q[32];
  for (int i = 0; i < 32; ++i) q[i] = clamp_round(x[i] * inv + float(offset), 0, 2 * offset - 1);
  pack_legacy(q, bits == 5 ? blk + 6 : blk + 2, bits == 5 ? blk + 2 : nullptr);
}

// Q4_1 / Q5_1: affine over [min, max].
void quantize_affine(int bits, const float* x, uint8_t* blk) {
  const int levels = (1 << bits) - 1;
  const float lo = *std::min_element(x, x + 32);
  const float hi = *std::max_element(x, x + 32);
  const float d = rounded_f16((hi - lo) / float(levels));
  const float m = rounded_f16(lo);
  const float inv = d != 0.0f ? 1.0f / d : 0.0f;
  store_f16(blk, d);
  store_f16(blk + 2, m);
  int q[32];
  for (int i = 0; i < 32; ++i) q[i] = clamp_round((x[i] - m) * inv, 0, levels);
  pack_legacy(q, bits == 5 ? blk + 8 : blk + 4, bits == 5 ? blk + 4 : nullptr);
}

// Packs 8 six-bit scales and mins into 12 bytes, the inverse of kquant_scale_min.
void pack_scale_min(const int sc[8], const int m[8], uint8_t* s) {
  for (int j = 0; j < 4; ++j) {
    s[j] = uint8_t((sc[j] & 63) | (sc[j + 4] >> 4) << 6);
    s[j + 4] = uint8_t((m[j] & 63) | (m[j + 4] >> 4) << 6);
    s[j + 8] = uint8_t((sc[j + 4] & 0xf) | (m[j + 4] & 0xf) << 4);
  }
}

// Q4_K / Q5_K: per sub-block of 32, an affine range [min(0, lo), hi]; the 8 ranges' scales and
// (negated) mins are quantised to 6 bits under the super-block's d and dmin.
void quantize_q45_k(int bits, const float* x, uint8_t* blk) {
  const int levels = (1 << bits) - 1;
  float scale[8], neg_min[8];
  float max_scale = 0.0f, max_neg_min = 0.0f;
  for (int j = 0; j < 8; ++j) {
    const float* xj = x + 32 * j;
    const float lo = std::min(0.0f, *std::min_element(xj, xj + 32));
    const float hi = *std::max_element(xj, xj + 32);
    scale[j] = (hi - lo) / float(levels);
    neg_min[j] = -lo;
    max_scale = std::max(max_scale, scale[j]);
    max_neg_min = std::max(max_neg_min, neg_min[j]);
  }
  const float d = rounded_f16(max_scale / 63.0f);
  const float dmin = rounded_f16(max_neg_min / 63.0f);
  int sc[8], m[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = d != 0.0f ? clamp_round(scale[j] / d, 0, 63) : 0;
    m[j] = dmin != 0.0f ? clamp_round(neg_min[j] / dmin, 0, 63) : 0;
  }
  store_f16(blk, d);
  store_f16(blk + 2, dmin);
  pack_scale_min(sc, m, blk + 4);
  uint8_t* qh = blk + 16;
  uint8_t* qs = blk + (bits == 5 ? 48 : 16);
  if (bits == 5) std::memset(qh, 0, 32);
  std::memset(qs, 0, 128);
  for (int j = 0; j < 8; ++j) {
    const float dj = d * float(sc[j]);
    const float mj = dmin * float(m[j]);
    const float inv = dj != 0.0f ? 1.0f / dj : 0.0f;
    for (int l = 0; l < 32; ++l) {
      const int q = clamp_round((x[32 * j + l] + mj) * inv, 0, levels);
      qs[32 * (j / 2) + l] |= uint8_t((q & 0xf) << (4 * (j % 2)));
      if (bits == 5) qh[l] |= uint8_t((q >> 4) << j);
    }
  }
}

// Q6_K: per group of 16 a symmetric scale (signed absmax / -32), quantised to int8 under d.
void quantize_q6_k(const float* x, uint8_t* blk) {
  float scale[16];
  float max_abs_scale = 0.0f;
  for (int g = 0; g < 16; ++g) {
    scale[g] = -signed_absmax(x + 16 * g, 16) / 32.0f;
    max_abs_scale = std::max(max_abs_scale, std::fabs(scale[g]));
  }
  const float d = rounded_f16(max_abs_scale / 127.0f);
  uint8_t* ql = blk;
  uint8_t* qh = blk + 128;
  auto* scales = reinterpret_cast<int8_t*>(blk + 192);
  std::memset(blk, 0, 192);
  for (int g = 0; g < 16; ++g) scales[g] = int8_t(d != 0.0f ? clamp_round(scale[g] / d, -128, 127) : 0);
  store_f16(blk + 208, d);
  for (int i = 0; i < 256; ++i) {
    const float dg = d * float(scales[i / 16]);
    const int q = dg != 0.0f ? clamp_round(x[i] / dg + 32.0f, 0, 63) : 32;
    const int h = i / 128, k = (i % 128) / 32, l = i % 32;
    ql[64 * h + 32 * (k % 2) + l] |= uint8_t((q & 0xf) << (k < 2 ? 0 : 4));
    qh[32 * h + l] |= uint8_t((q >> 4) << (2 * k));
  }
}

}  // namespace

void quantize_row(DType t, const float* src, void* dst, int64_t n) {
  auto* out = static_cast<uint8_t*>(dst);
  const int bs = block_size(t);
  if (bs == 1) throw std::invalid_argument("quantize_row: " + std::string(dtype_name(t)) + " is not a block format");
  if (n % bs != 0)
    throw std::invalid_argument("quantize_row: " + std::string(dtype_name(t)) + " needs a multiple of " +
                                std::to_string(bs) + " elements, got " + std::to_string(n));
  for (int64_t b = 0; b < n / bs; ++b) {
    const float* x = src + b * bs;
    uint8_t* blk = out + b * block_bytes(t);
    switch (t) {
      case DType::Q8_0: quantize_row_q8_0(x, blk, bs); break;
      case DType::Q4_0: quantize_symmetric(4, x, blk); break;
      case DType::Q5_0: quantize_symmetric(5, x, blk); break;
      case DType::Q4_1: quantize_affine(4, x, blk); break;
      case DType::Q5_1: quantize_affine(5, x, blk); break;
      case DType::Q4_K: quantize_q45_k(4, x, blk); break;
      case DType::Q5_K: quantize_q45_k(5, x, blk); break;
      case DType::Q6_K: quantize_q6_k(x, blk); break;
      default: break;
    }
  }
}

}  // namespace inflight::kernels

#include "kernels/dtype.h"

#include <algorithm>
#include <cmath>

namespace inflight::kernels {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::Q8_0: return "q8_0";
    case DType::Q4_0: return "q4_0";
    case DType::Q4_1: return "q4_1";
    case DType::Q5_0: return "q5_0";
    case DType::Q5_1: return "q5_1";
    case DType::Q4_K: return "q4_k";
    case DType::Q5_K: return "q5_k";
    case DType::Q6_K: return "q6_k";
  }
  return "?";
}

namespace {

float load_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// The 5-bit quants of a Q4_0 / Q4_1 (qh == nullptr) or Q5_0 / Q5_1 block: q[32] in element order.
void unpack_legacy(const uint8_t* qs, const uint8_t* qh, int q[32]) {
  uint32_t high = 0;
  if (qh) std::memcpy(&high, qh, 4);
  for (int i = 0; i < 16; ++i) {
    q[i] = (qs[i] & 0xf) | int((high >> i) & 1) << 4;
    q[i + 16] = (qs[i] >> 4) | int((high >> (i + 16)) & 1) << 4;
  }
}

// One legacy block of 32: value = d * (q - offset) (no min), or d * q + m.
void dequantize_legacy(DType t, const uint8_t* blk, float* dst) {
  const float d = load_f16(blk);
  const bool has_min = t == DType::Q4_1 || t == DType::Q5_1;
  const bool has_high = t == DType::Q5_0 || t == DType::Q5_1;
  const uint8_t* p = blk + (has_min ? 4 : 2);
  const uint8_t* qh = has_high ? p : nullptr;
  int q[32];
  unpack_legacy(has_high ? p + 4 : p, qh, q);
  if (has_min) {
    const float m = load_f16(blk + 2);
    for (int i = 0; i < 32; ++i) dst[i] = float(q[i]) * d + m;
  } else {
    const int offset = has_high ? 16 : 8;
    for (int i = 0; i < 32; ++i) dst[i] = float(q[i] - offset) * d;
  }
}

// One Q4_K / Q5_K super-block of 256. Sub-block pair (2c, 2c + 1) takes the low / high nibbles of
// qs[32c .. 32c + 32]; Q5_K's fifth bit of sub-block j, element l is bit j of qh[l].
void dequantize_q45_k(bool five_bit, const uint8_t* blk, float* dst) {
  const float d = load_f16(blk);
  const float dmin = load_f16(blk + 2);
  const uint8_t* scales = blk + 4;
  const uint8_t* qh = blk + 16;
  const uint8_t* qs = blk + (five_bit ? 48 : 16);
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    kquant_scale_min(j, scales, sc, m);
    const float dj = d * float(sc);
    const float mj = dmin * float(m);
    const uint8_t* q = qs + 32 * (j / 2);
    for (int l = 0; l < 32; ++l) {
      int v = j % 2 == 0 ? q[l] & 0xf : q[l] >> 4;
      if (five_bit) v |= ((qh[l] >> j) & 1) << 4;
      dst[32 * j + l] = dj * float(v) - mj;
    }
  }
}

// One Q6_K super-block: two halves of 128; in half h, element 32k + l (k < 4, l < 32) has the low
// nibble (k = 0, 1) or high nibble (k = 2, 3) of ql[64h + 32(k % 2) + l] and bits 2k, 2k + 1 of qh[32h + l].
void dequantize_q6_k(const uint8_t* blk, float* dst) {
  const uint8_t* ql = blk;
  const uint8_t* qh = blk + 128;
  const auto* scales = reinterpret_cast<const int8_t*>(blk + 192);
  const float d = load_f16(blk + 208);
  for (int h = 0; h < 2; ++h) {
    for (int k = 0; k < 4; ++k) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t lo = ql[64 * h + 32 * (k % 2) + l];
        const int q = (k < 2 ? lo & 0xf : lo >> 4) | ((qh[32 * h + l] >> (2 * k)) & 3) << 4;
        const int i = 128 * h + 32 * k + l;
        dst[i] = d * float(scales[i / 16]) * float(q - 32);
      }
    }
  }
}

}  // namespace

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  switch (t) {
    case DType::F32: {
      std::memcpy(dst, src, size_t(n) * sizeof(float));
      return;
    }
    case DType::F16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(h[i]);
      return;
    }
    case DType::BF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(h[i]);
      return;
    }
    case DType::Q8_0: {
      const auto* block = static_cast<const uint8_t*>(src);
      for (int64_t b = 0; b < n / kQ8BlockSize; ++b, block += kQ8BlockBytes) {
        uint16_t d16;
        std::memcpy(&d16, block, 2);
        const float d = f16_to_f32(d16);
        const auto* q = reinterpret_cast<const int8_t*>(block + 2);
        for (int i = 0; i < kQ8BlockSize; ++i) dst[b * kQ8BlockSize + i] = d * float(q[i]);
      }
      return;
    }
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1: {
      const auto* blk = static_cast<const uint8_t*>(src);
      for (int64_t b = 0; b < n / 32; ++b) dequantize_legacy(t, blk + b * block_bytes(t), dst + b * 32);
      return;
    }
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K: {
      const auto* blk = static_cast<const uint8_t*>(src);
      for (int64_t b = 0; b < n / kQkBlockSize; ++b) {
        if (t == DType::Q6_K) dequantize_q6_k(blk + b * block_bytes(t), dst + b * kQkBlockSize);
        else dequantize_q45_k(t == DType::Q5_K, blk + b * block_bytes(t), dst + b * kQkBlockSize);
      }
      return;
    }
  }
}

void quantize_row_q8_0(const float* src, void* dst, int64_t n) {
  auto* block = static_cast<uint8_t*>(dst);
  for (int64_t b = 0; b < n / kQ8BlockSize; ++b, block += kQ8BlockBytes) {
    const float* x = src + b * kQ8BlockSize;
    float amax = 0.0f;
    for (int i = 0; i < kQ8BlockSize; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.0f;
    const float inv = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t d16 = f32_to_f16(d);
    std::memcpy(block, &d16, 2);
    for (int i = 0; i < kQ8BlockSize; ++i) block[2 + i] = uint8_t(int8_t(std::lround(x[i] * inv)));
  }
}

}  // namespace inflight::kernels

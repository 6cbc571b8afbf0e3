// The scalar Q4_0 .. Q6_K matmul: the integer dot products spelled out (matmul_quant_formula.h). The
// SIMD files compute the same integers and the same float expressions, so they agree bit for bit.
#include <cmath>
#include <cstring>

#include "kernels/cpu/matmul_kernels.h"
#include "kernels/cpu/matmul_kquant_interleave.h"
#include "kernels/cpu/matmul_legacy_interleave.h"
#include "kernels/cpu/matmul_quant_formula.h"

namespace inflight::kernels::cpu {
namespace {

float load_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// The unsigned quants u[32] of a Q4_0 .. Q5_1 block, in element order.
void legacy_quants(DType t, const uint8_t* blk, uint8_t u[32]) {
  const bool has_min = t == DType::Q4_1 || t == DType::Q5_1;
  const bool has_high = t == DType::Q5_0 || t == DType::Q5_1;
  const uint8_t* p = blk + (has_min ? 4 : 2);
  uint32_t high = 0;
  if (has_high) std::memcpy(&high, p, 4);
  const uint8_t* qs = has_high ? p + 4 : p;
  for (int i = 0; i < 16; ++i) {
    u[i] = uint8_t((qs[i] & 0xf) | ((high >> i) & 1) << 4);
    u[i + 16] = uint8_t((qs[i] >> 4) | ((high >> (i + 16)) & 1) << 4);
  }
}

// The unsigned quants u[256] of a K-quant super-block, in element order (layouts in dtype.cpp).
void kquant_quants(DType t, const uint8_t* blk, uint8_t u[256]) {
  if (t == DType::Q6_K) {
    const uint8_t* ql = blk;
    const uint8_t* qh = blk + 128;
    for (int i = 0; i < 256; ++i) {
      const int h = i / 128, k = (i % 128) / 32, l = i % 32;
      const uint8_t lo = ql[64 * h + 32 * (k % 2) + l];
      u[i] = uint8_t((k < 2 ? lo & 0xf : lo >> 4) | ((qh[32 * h + l] >> (2 * k)) & 3) << 4);
    }
    return;
  }
  const bool five_bit = t == DType::Q5_K;
  const uint8_t* qh = blk + 16;
  const uint8_t* qs = blk + (five_bit ? 48 : 16);
  for (int j = 0; j < 8; ++j) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t b = qs[32 * (j / 2) + l];
      int v = j % 2 == 0 ? b & 0xf : b >> 4;
      if (five_bit) v |= ((qh[l] >> j) & 1) << 4;
      u[32 * j + l] = uint8_t(v);
    }
  }
}

int32_t dot(const uint8_t* u, const int8_t* x, int n) {
  int32_t s = 0;
  for (int i = 0; i < n; ++i) s += int32_t(u[i]) * int32_t(x[i]);
  return s;
}

void rows_legacy(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
  const int64_t num_blocks = a.cols / 32;
  const int bytes = block_bytes(a.dtype);
  const bool has_min = a.dtype == DType::Q4_1 || a.dtype == DType::Q5_1;
  const int32_t offset = has_min ? 0 : a.dtype == DType::Q4_0 ? 8 : 16;
  const bool five = a.dtype == DType::Q5_0;
  uint8_t u[32], plain[32];  // plain: a block of an interleaved Q4_0 / Q5_0 matrix as stored
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint8_t* row = a.w + r * a.w_row_bytes;
    for (int64_t t = 0; t < a.num_tokens; ++t) {
      const int8_t* xq = a.xq + t * a.cols;
      const float* xd = a.xd + t * num_blocks;
      const float* xm = a.xm + t * num_blocks;
      float acc[8] = {};
      float msum = 0.0f;
      for (int64_t b = 0; b < num_blocks; ++b) {
        const uint8_t* blk = row + b * bytes;
        if (a.interleaved) {
          legacy_interleaved_block(a.w, num_blocks, five, r, b, plain);
          blk = plain;
        }
        legacy_quants(a.dtype, blk, u);
        const float scale = load_f16(blk) * xd[b];
        for (int i = 0; i < 8; ++i) {
          int32_t lane = 0;
          for (int e = 4 * i; e < 4 * i + 4; ++e) lane += (int32_t(u[e]) - offset) * int32_t(xq[32 * b + e]);
          acc[i] = std::fma(float(lane), scale, acc[i]);
        }
        if (has_min) msum += load_f16(blk + 2) * xm[b];
      }
      a.y[t * a.rows + r] = has_min ? legacy_finish(legacy_reduce(acc), msum) : legacy_reduce(acc);
    }
  }
}

void rows_kquant(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
  const int64_t num_blocks = a.cols / 256;
  const int bytes = block_bytes(a.dtype);
  const bool six_bit = a.dtype == DType::Q6_K;
  uint8_t u[256], plain[kQ6KBytes];  // plain: a super-block of an interleaved matrix as stored
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint8_t* row = a.w + r * a.w_row_bytes;
    for (int64_t t = 0; t < a.num_tokens; ++t) {
      const int8_t* xq = a.xq + t * a.cols;
      const float* xd = a.xd + t * num_blocks;
      const int16_t* xs = a.xs + t * (a.cols / 16);
      float acc[8] = {};
      for (int64_t b = 0; b < num_blocks; ++b) {
        const uint8_t* blk = row + b * bytes;
        if (a.interleaved) {
          kquant_interleaved_block(a.dtype, a.w, num_blocks, bytes, r, b, plain);
          blk = plain;
        }
        const int8_t* xb = xq + 256 * b;
        const int16_t* sb = xs + 16 * b;
        kquant_quants(a.dtype, blk, u);
        const auto* sc6 = reinterpret_cast<const int8_t*>(blk + 192);
        int sc[8], m[8];
        if (!six_bit)
          for (int j = 0; j < 8; ++j) kquant_scale_min(j, blk + 4, sc[j], m[j]);
        const float scale_d = load_f16(blk + (six_bit ? 208 : 0)) * xd[b];
        const float scale_min = six_bit ? 0.0f : load_f16(blk + 2) * xd[b];
        for (int i = 0; i < 8; ++i) {
          int32_t lane = 0;
          for (int k = 0; k < 8; ++k) {
            const int32_t scale = six_bit ? sc6[2 * k + i / 4] : sc[k];
            lane += scale * dot(u + 32 * k + 4 * i, xb + 32 * k + 4 * i, 4);
          }
          if (six_bit) {
            lane -= 32 * (sc6[2 * i] * sb[2 * i] + sc6[2 * i + 1] * sb[2 * i + 1]);
            acc[i] = std::fma(float(lane), scale_d, acc[i]);
          } else {
            const int32_t msum = m[i] * (int32_t(sb[2 * i]) + int32_t(sb[2 * i + 1]));
            acc[i] = std::fma(float(lane), scale_d, acc[i]);
            acc[i] = std::fma(-float(msum), scale_min, acc[i]);
          }
        }
      }
      a.y[t * a.rows + r] = legacy_reduce(acc);
    }
  }
}

}  // namespace

void matmul_rows_quant_scalar(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
  if (is_kquant(a.dtype)) rows_kquant(a, row_begin, row_end);
  else rows_legacy(a, row_begin, row_end);
}

}  // namespace inflight::kernels::cpu

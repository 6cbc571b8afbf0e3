// The kernel of the 32-weight block formats (Q8_0 here; Q4_0 .. Q5_1 in matmul_quant_int8.h) x int8
// activations, shared by the AVX2, AVX-512 and AVX-512 VNNI files (256-bit integer ops; each file
// instantiates it under its own -m flags, see matmul_kernels.h).
//
// Per 32-weight block b of row r and token t, with qw the block's signed quants (Format::quants):
//   dot = sum_i qw[i] * xq[i]   exact in int32 (8 lanes of 4 products; see MaddubsDot / VnniDot)
//   acc[r][t] += float(dot lanes) * (dw[r, b] * xd[t, b])   8-lane f32 accumulator, fixed lane order
// and, for formats with a min (Q4_1, Q5_1), msum[r][t] += mw[r, b] * xm[t, b] in block order; then
// y = reduce(acc) (+ msum). Nothing in the per-output sequence depends on R or T.
//
// NOTE: anonymous namespace on purpose; include only from the per-ISA .cpp files.
#pragma once
#include <immintrin.h>

#include "kernels/cpu/matmul_tiling.h"

namespace inflight::kernels::cpu {
namespace {

constexpr int kQ8Bytes = 34;  // f16 scale + 32 int8 per block, see dtype.h

// Fixed-order sum of the 8 lanes.
inline float reduce_add_256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// Block dot products in 8 int32 lanes of 4 products each, AVX2: |qw| (u8) x (xq * sign(qw)) (s8) with
// maddubs + madd. |qw| <= 128 and |xq| <= 127, so maddubs' int16 pair sums cannot saturate.
struct MaddubsDot {
  struct Row {  // per row and block
    __m256i qw, abs_qw;
  };
  static __m256i prepare_x(__m256i xq) { return xq; }
  static Row prepare_row(__m256i qw) { return {qw, _mm256_abs_epi8(qw)}; }  // |-128| reads as u8 128
  static __m256i dot(const Row& w, __m256i x) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w.abs_qw, _mm256_sign_epi8(x, w.qw)), _mm256_set1_epi16(1));
  }
  // start + u . x for unsigned quants u <= 31 (pair sums <= 2 * 31 * 128, no saturation).
  static __m256i unsigned_dot(__m256i start, __m256i u, __m256i x) {
    return _mm256_add_epi32(start, _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), _mm256_set1_epi16(1)));
  }
};

#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
// The same sums with vpdpbusd (non-saturating): activations are offset to u8 (xq + 128) as they are
// loaded (shared by the tile's rows); each row's dot starts from -128 * sum(qw) over the same 4-lane
// groups, so the result is exact and no per-(row, token) sign fix-up is needed.
struct VnniDot {
  struct Row {
    __m256i qw, minus_offset;
  };
  static __m256i prepare_x(__m256i xq) { return _mm256_xor_si256(xq, _mm256_set1_epi8(char(0x80))); }
  static Row prepare_row(__m256i qw) {
    const __m256i offset = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(char(0x80)), qw);
    return {qw, _mm256_sub_epi32(_mm256_setzero_si256(), offset)};
  }
  static __m256i dot(const Row& w, __m256i x) { return _mm256_dpbusd_epi32(w.minus_offset, x, w.qw); }
  static __m256i unsigned_dot(__m256i start, __m256i u, __m256i x) { return _mm256_dpbusd_epi32(start, u, x); }
};
#endif

// 4 activation quants as one int32, for a broadcast.
inline int32_t load_i32(const int8_t* p) {
  int32_t v;
  __builtin_memcpy(&v, p, 4);
  return v;
}

inline float f16_at(const uint8_t* p) {
  uint16_t h;
  __builtin_memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// Q8_0: f16 scale, 32 int8 quants.
struct Q8Format {
  static constexpr int kBytes = kQ8Bytes;
  static constexpr bool kHasMin = false;
  static constexpr bool kUnsigned = false;
  static __m256i quants(const uint8_t* blk) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2)); }
};

// Format: kBytes, kHasMin, kUnsigned, quants(blk) (32 int8, the f16 scale at blk), min(blk) (the f16 min,
// kHasMin only). Unsigned formats (Q4_0 .. Q5_1 at a few tokens) give quants u = q + kUnsignedOffset,
// and each block's dot starts from -kUnsignedOffset times the 4-quant group sums of x (MatmulArgs::xo):
// the same int32 lanes as the signed dot, without the per-row offset a signed weight operand costs.
// kNumRegs: vector registers of the ISA (16 ymm for AVX2, 32 for AVX-512).
template <class Format, class Dot, int kNumRegs>
struct Block32Kernel {
  // Budget: R*T accumulators + 2T activation blocks and scales + 2 per row in flight + temporaries.
  // One token: one row at a time. Streaming Q8_0 rows one by one measured 1.3-1.4x faster from DRAM
  // than interleaving 2-8 rows (Zen 4, AVX2 and AVX-512 alike), unlike the f32/f16 kernels.
  template <int T>
  static constexpr int rows_per_tile() {
    if constexpr (T == 1) return 1;
    if constexpr (kNumRegs >= 32) return T == 2 ? 8 : 4;
    return T == 2 ? 4 : 2;
  }

  template <int R, int T>
  static void tile(const MatmulArgs& a, int64_t r0, int64_t t0) {
    const int64_t num_blocks = a.cols / 32;
    const uint8_t* w = a.w + r0 * a.w_row_bytes;  // [R, w_row_bytes]
    const int8_t* xq = a.xq + t0 * a.cols;        // [T, cols]
    const float* xd = a.xd + t0 * num_blocks;     // [T, num_blocks]
    const float* xm = a.xm + t0 * num_blocks;     // [T, num_blocks], kHasMin only
    const int32_t* xo = a.xo + t0 * num_blocks * 8;  // [T, num_blocks, 8], kUnsigned with an offset only
    __m256 acc[R][T];
    float msum[R][T] = {};
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();

#pragma GCC unroll 2
    for (int64_t b = 0; b < num_blocks; ++b) {
      __m256i xv[T], start[T];
      __m256 dx[T];
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + t * a.cols + b * 32));
        dx[t] = _mm256_broadcast_ss(xd + t * num_blocks + b);
        if constexpr (!Format::kUnsigned) {
          xv[t] = Dot::prepare_x(x);
        } else {
          xv[t] = x;
          start[t] = _mm256_setzero_si256();
          if constexpr (Format::kUnsignedOffset != 0) {
            const __m256i o16 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xo + (t * num_blocks + b) * 8));
            start[t] = Format::kUnsignedOffset == 16 ? o16 : _mm256_srai_epi32(o16, 1);
          }
        }
      }
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const uint8_t* blk = w + r * a.w_row_bytes + b * Format::kBytes;
        const __m256 dw = _mm256_set1_ps(f16_at(blk));
        if constexpr (Format::kUnsigned) {
          const __m256i u = Format::quants(blk);
#pragma GCC unroll 4
          for (int t = 0; t < T; ++t) {
            const __m256i dot = Dot::unsigned_dot(start[t], u, xv[t]);
            acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(dw, dx[t]), acc[r][t]);
          }
        } else {
          const typename Dot::Row row = Dot::prepare_row(Format::quants(blk));
#pragma GCC unroll 4
          for (int t = 0; t < T; ++t) {
            const __m256i dot = Dot::dot(row, xv[t]);
            acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(dw, dx[t]), acc[r][t]);
          }
        }
        if constexpr (Format::kHasMin) {
          const float mw = Format::min(blk);
#pragma GCC unroll 4
          for (int t = 0; t < T; ++t) msum[r][t] += mw * xm[t * num_blocks + b];
        }
      }
    }
    float* y = a.y + t0 * a.rows + r0;  // [T, rows]
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) y[t * a.rows + r] = Format::kHasMin ? reduce_add_256(acc[r][t]) + msum[r][t] : reduce_add_256(acc[r][t]);
  }
};

}  // namespace
}  // namespace inflight::kernels::cpu

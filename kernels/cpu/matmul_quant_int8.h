// The Q4_0 .. Q6_K x int8-activation kernels shared by the AVX2, AVX-512 and AVX-512 VNNI files
// (256-bit integer ops; each file instantiates them under its own -m flags, see matmul_kernels.h).
//
// Weights are unpacked in registers to their unsigned quants u (0 .. 63), 32 at a time, and multiplied
// with the int8 activations as u8 x s8 (maddubs: pair sums <= 2 * 63 * 127, no saturation; or vpdpbusd).
// Offsets (-8, -16, -32) and mins are applied through the activation sums xs, as llama.cpp's vec_dot
// does, and the block is finished in float by matmul_quant_formula.h: the same integers and the same
// float expression as the scalar path, so results are identical on every ISA. Nothing in the
// per-output sequence depends on R or T.
//
// NOTE: anonymous namespace on purpose; include only from the per-ISA .cpp files. No dtype.h helper is
// called here (they have external linkage).
#pragma once
#include <immintrin.h>

#include "kernels/cpu/matmul_quant_formula.h"
#include "kernels/cpu/matmul_tiling.h"

namespace inflight::kernels::cpu {
namespace {

inline float half_to_float(const uint8_t* p) {
  uint16_t h;
  __builtin_memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)): the lane order legacy_reduce spells out.
inline float reduce_add_ps(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// Exact sum of the 8 int32 lanes.
inline int32_t reduce_add_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

// u8 x s8 block dots in 8 int32 lanes, lane i = sum of elements 4i .. 4i + 3.
struct MaddubsU8Dot {
  static __m256i dot(__m256i u, __m256i x) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), _mm256_set1_epi16(1));
  }
};

#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
struct VnniU8Dot {
  static __m256i dot(__m256i u, __m256i x) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, x); }
};
#endif

inline __m256i low_nibbles(__m256i v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0f)); }
inline __m256i high_nibbles(__m256i v) { return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0f)); }

// 16 bytes of nibbles -> 32 quants: low nibbles are elements 0..15, high nibbles 16..31.
inline __m256i unpack_nibbles16(const uint8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return low_nibbles(_mm256_set_m128i(_mm_srli_epi16(q, 4), q));
}

// Bit i of the 32 bits at qh -> 16 in byte i, else 0.
inline __m256i fifth_bits(const uint8_t* qh) {
  uint32_t bits;
  __builtin_memcpy(&bits, qh, 4);
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(int(bits)),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
  const __m256i mask = _mm256_set1_epi64x(int64_t(0x8040201008040201));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, mask), mask), _mm256_set1_epi8(16));
}

// Q4_0 / Q4_1 / Q5_0 / Q5_1: kHasMin (Q4_1, Q5_1), kHasHigh (Q5_0, Q5_1); blocks of 32.
template <bool kHasMin, bool kHasHigh>
struct LegacyFormat {
  static constexpr int kBytes = 2 + (kHasMin ? 2 : 0) + (kHasHigh ? 4 : 0) + 16;
  static constexpr int kOffsetShift = kHasMin ? 0 : kHasHigh ? 4 : 3;  // offset 16 / 8 (none with a min)
  static __m256i quants(const uint8_t* blk) {
    const uint8_t* p = blk + (kHasMin ? 4 : 2);
    if constexpr (kHasHigh) return _mm256_or_si256(unpack_nibbles16(p + 4), fifth_bits(p));
    else return unpack_nibbles16(p);
  }
};

// Lane-wise, as matmul_quant_formula.h defines for the legacy types: 8 f32 lanes per output, each fed by
// fma(float(lane's exact int dot), dw * dx); the min term in a scalar; one fixed-order reduction at the end.
template <class Format, class Dot, int kNumRegs>
struct LegacyKernel {
  // Budget: R*T accumulators + 2T activation vectors (quants, 4-sums) + quants and temporaries.
  template <int T>
  static constexpr int rows_per_tile() {
    if constexpr (T == 1) return 1;
    if constexpr (kNumRegs >= 32) return T == 2 ? 8 : 4;
    return T == 2 ? 2 : 1;
  }

  template <int R, int T>
  static void tile(const MatmulArgs& a, int64_t r0, int64_t t0) {
    const int64_t num_blocks = a.cols / 32;
    const uint8_t* w = a.w + r0 * a.w_row_bytes;  // [R, w_row_bytes]
    const int8_t* xq = a.xq + t0 * a.cols;        // [T, cols]
    const float* xd = a.xd + t0 * num_blocks;     // [T, num_blocks]
    const float* xm = a.xm + t0 * num_blocks;     // [T, num_blocks]
    __m256 acc[R][T];
    float msum[R][T] = {};
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < num_blocks; ++b) {
      __m256i xv[T], xoff[T];  // activations; their 4-sums times the offset
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        xv[t] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + t * a.cols + b * 32));
        if constexpr (Format::kOffsetShift > 0)
          xoff[t] = _mm256_slli_epi32(Dot::dot(_mm256_set1_epi8(1), xv[t]), Format::kOffsetShift);
      }
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const uint8_t* blk = w + r * a.w_row_bytes + b * Format::kBytes;
        const __m256i u = Format::quants(blk);
        const float dw = half_to_float(blk);
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          __m256i lanes = Dot::dot(u, xv[t]);
          if constexpr (Format::kOffsetShift > 0) lanes = _mm256_sub_epi32(lanes, xoff[t]);
          acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), _mm256_set1_ps(dw * xd[t * num_blocks + b]), acc[r][t]);
          if constexpr (Format::kOffsetShift == 0) msum[r][t] += half_to_float(blk + 2) * xm[t * num_blocks + b];
        }
      }
    }
    float* y = a.y + t0 * a.rows + r0;  // [T, rows]
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) y[t * a.rows + r] = legacy_finish(reduce_add_ps(acc[r][t]), msum[r][t]);
  }
};

// Q4_K / Q5_K super-block of 256: chunk k (32 quants) is sub-block k; int32 scale lanes all sc_k.
template <bool kFiveBit>
struct Q45KFormat {
  static constexpr int kBytes = kFiveBit ? 176 : 144;
  struct Scales {
    int32_t sc[8];
    alignas(32) int16_t mins[16];  // m_j twice: pairs with the activation sums per 16
  };
  static void scales(const uint8_t* blk, Scales& s) {
    const uint8_t* p = blk + 4;
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      if (j < 4) {
        sc = p[j] & 63;
        m = p[j + 4] & 63;
      } else {
        sc = (p[j + 4] & 0xf) | (p[j - 4] >> 6) << 4;
        m = (p[j + 4] >> 4) | (p[j] >> 6) << 4;
      }
      s.sc[j] = sc;
      s.mins[2 * j] = s.mins[2 * j + 1] = int16_t(m);
    }
  }
  static __m256i quants(const uint8_t* blk, int k) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + (kFiveBit ? 48 : 16) + 32 * (k / 2)));
    const __m256i u = k % 2 == 0 ? low_nibbles(q) : high_nibbles(q);
    if constexpr (!kFiveBit) return u;
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16));
    const __m256i bit = _mm256_and_si256(_mm256_srli_epi16(qh, k), _mm256_set1_epi8(1));
    return _mm256_or_si256(u, _mm256_slli_epi16(bit, 4));
  }
  static __m256i scale_lanes(const Scales& s, int k) { return _mm256_set1_epi32(s.sc[k]); }
  // iacc: sum_k sc_k * dot_k in lanes; xs: the 16 activation sums of this super-block.
  static float term(const uint8_t* blk, const Scales& s, float dx, __m256i iacc, const int16_t* xs) {
    const __m256i msum = _mm256_madd_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(s.mins)),
                                           _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs)));
    return q45k_term(half_to_float(blk), half_to_float(blk + 2), dx, reduce_add_epi32(iacc), reduce_add_epi32(msum));
  }
};

// Q6_K super-block: chunk k = 32 quants of half k / 4; lanes 0..3 belong to group 2k, 4..7 to 2k + 1.
struct Q6KFormat {
  static constexpr int kBytes = 210;
  struct Scales {
    __m128i sc8;  // the 16 int8 group scales
  };
  static void scales(const uint8_t* blk, Scales& s) {
    s.sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192));
  }
  static __m256i quants(const uint8_t* blk, int k) {
    const int h = k / 4, kk = k % 4;
    const __m256i ql = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * h + 32 * (kk % 2)));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h));
    const __m256i lo = kk < 2 ? low_nibbles(ql) : high_nibbles(ql);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * kk), _mm256_set1_epi8(3));
    return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
  }
  static __m256i scale_lanes(const Scales& s, int k) {
    const char g0 = char(2 * k), g1 = char(2 * k + 1);
    const __m128i pick = _mm_setr_epi8(g0, g0, g0, g0, g1, g1, g1, g1, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm256_cvtepi8_epi32(_mm_shuffle_epi8(s.sc8, pick));
  }
  static float term(const uint8_t* blk, const Scales& s, float dx, __m256i iacc, const int16_t* xs) {
    // sum_g sc_g * 32 * xsum_g, folded into the lanes before the one reduction
    const __m256i off = _mm256_madd_epi16(_mm256_cvtepi8_epi16(s.sc8), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs)));
    return q6k_term(half_to_float(blk + 208), dx, reduce_add_epi32(_mm256_sub_epi32(iacc, _mm256_slli_epi32(off, 5))));
  }
};

template <class Format, class Dot, int kNumRegs>
struct KQuantKernel {
  // Budget: R*T int32 accumulators + T activation chunks + quants, scales and temporaries.
  template <int T>
  static constexpr int rows_per_tile() {
    if constexpr (T == 1) return 1;
    if constexpr (kNumRegs >= 32) return T == 2 ? 8 : 4;
    return T == 2 ? 4 : 2;
  }

  template <int R, int T>
  static void tile(const MatmulArgs& a, int64_t r0, int64_t t0) {
    const int64_t num_blocks = a.cols / 256;
    const uint8_t* w = a.w + r0 * a.w_row_bytes;  // [R, w_row_bytes]
    const int8_t* xq = a.xq + t0 * a.cols;        // [T, cols]
    const float* xd = a.xd + t0 * num_blocks;     // [T, num_blocks]
    const int16_t* xs = a.xs + t0 * (a.cols / 16);  // [T, cols / 16]
    float sum[R][T] = {};
    for (int64_t b = 0; b < num_blocks; ++b) {
      typename Format::Scales sc[R];
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) Format::scales(w + r * a.w_row_bytes + b * Format::kBytes, sc[r]);
      __m256i iacc[R][T];
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) iacc[r][t] = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        __m256i xv[T];
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t)
          xv[t] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + t * a.cols + b * 256 + 32 * k));
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const uint8_t* blk = w + r * a.w_row_bytes + b * Format::kBytes;
          const __m256i u = Format::quants(blk, k);
          const __m256i scale = Format::scale_lanes(sc[r], k);
#pragma GCC unroll 4
          for (int t = 0; t < T; ++t)
            iacc[r][t] = _mm256_add_epi32(iacc[r][t], _mm256_mullo_epi32(Dot::dot(u, xv[t]), scale));
        }
      }
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const uint8_t* blk = w + r * a.w_row_bytes + b * Format::kBytes;
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t)
          sum[r][t] += Format::term(blk, sc[r], xd[t * num_blocks + b], iacc[r][t], xs + t * (a.cols / 16) + 16 * b);
      }
    }
    float* y = a.y + t0 * a.rows + r0;  // [T, rows]
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) y[t * a.rows + r] = sum[r][t];
  }
};

// Runs the kernel of a.dtype (Q4_0 .. Q6_K) with dot product Dot.
template <class Dot, int kNumRegs>
void run_quant(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
  switch (a.dtype) {
    case DType::Q4_0: run_tiled<LegacyKernel<LegacyFormat<false, false>, Dot, kNumRegs>>(a, row_begin, row_end); return;
    case DType::Q4_1: run_tiled<LegacyKernel<LegacyFormat<true, false>, Dot, kNumRegs>>(a, row_begin, row_end); return;
    case DType::Q5_0: run_tiled<LegacyKernel<LegacyFormat<false, true>, Dot, kNumRegs>>(a, row_begin, row_end); return;
    case DType::Q5_1: run_tiled<LegacyKernel<LegacyFormat<true, true>, Dot, kNumRegs>>(a, row_begin, row_end); return;
    case DType::Q4_K: run_tiled<KQuantKernel<Q45KFormat<false>, Dot, kNumRegs>>(a, row_begin, row_end); return;
    case DType::Q5_K: run_tiled<KQuantKernel<Q45KFormat<true>, Dot, kNumRegs>>(a, row_begin, row_end); return;
    case DType::Q6_K: run_tiled<KQuantKernel<Q6KFormat, Dot, kNumRegs>>(a, row_begin, row_end); return;
    default: return;
  }
}

}  // namespace
}  // namespace inflight::kernels::cpu

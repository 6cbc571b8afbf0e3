// AVX2 + FMA + F16C matmul. Compiled with -mavx2 -mfma -mf16c; reached when active_isa() is Avx2, and for
// interleaved Q8_0 when it is Avx512 (no VNNI).
// Float weights: one 8-lane f32 accumulator per output, fed in column order (8-column steps, a
// zero-padded last step), then a fixed-order horizontal sum. Q8_0: matmul_q8_int8.h; Q4_0 .. Q6_K:
// matmul_quant_int8.h.
#include <immintrin.h>

#include "kernels/cpu/matmul_q8_int8.h"
#include "kernels/cpu/matmul_quant_int8.h"
#include "kernels/cpu/matmul_quantize_blocks.h"
#include "kernels/cpu/matmul_tiling.h"
#include "kernels/matmul.h"  // the interleaved layouts' constants


namespace inflight::kernels::cpu {
namespace {

// The first n (< 8) floats at p, zero-padded to 8.
inline __m256 load_partial(const float* p, int64_t n) {
  alignas(32) float buf[8] = {};
  for (int64_t i = 0; i < n; ++i) buf[i] = p[i];
  return _mm256_load_ps(buf);
}

inline __m256 widen_bf16(__m128i h) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); }

// The first n (< 8) halfwords at p, zero-padded to 8.
inline __m128i load_partial_u16(const uint8_t* p, int64_t n) {
  alignas(16) uint16_t buf[8] = {};
  __builtin_memcpy(buf, p, size_t(n) * 2);
  return _mm_load_si128(reinterpret_cast<const __m128i*>(buf));
}

// Reads one weight row as 8-wide f32 slices starting at column c; load_partial reads only n < 8
// columns and zero-fills the rest.
template <DType D>
struct RowReader;

template <>
struct RowReader<DType::F32> {
  static __m256 load(const uint8_t* row, int64_t c) { return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + c); }
  static __m256 load_partial(const uint8_t* row, int64_t c, int64_t n) {
    return cpu::load_partial(reinterpret_cast<const float*>(row) + c, n);
  }
};

template <>
struct RowReader<DType::F16> {
  static __m256 load(const uint8_t* row, int64_t c) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * c)));
  }
  static __m256 load_partial(const uint8_t* row, int64_t c, int64_t n) {
    return _mm256_cvtph_ps(load_partial_u16(row + 2 * c, n));
  }
};

template <>
struct RowReader<DType::BF16> {
  static __m256 load(const uint8_t* row, int64_t c) {
    return widen_bf16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * c)));
  }
  static __m256 load_partial(const uint8_t* row, int64_t c, int64_t n) {
    return widen_bf16(load_partial_u16(row + 2 * c, n));
  }
};

template <DType D>
struct Avx2Kernel {
  // Budget (16 ymm): R*T accumulators + T x slices + 1 weight slice.
  // One token: one row at a time, as Block32Kernel (a single stream the prefetchers follow; SmolLM f16
  // decode 99 against 70 tok/s with 8 rows, medians of 5 alternating, INFLIGHT_ISA=avx2).
  template <int T>
  static constexpr int rows_per_tile() { return T == 1 ? 1 : T == 2 ? 4 : 2; }

  template <int R, int T>
  static void tile(const MatmulArgs& a, int64_t r0, int64_t t0) {
    using Reader = RowReader<D>;
    const int64_t cols = a.cols;
    const uint8_t* w = a.w + r0 * a.w_row_bytes;  // [R, w_row_bytes]
    const float* x = a.x + t0 * cols;             // [T, cols]
    __m256 acc[R][T];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();

    int64_t c = 0;
    for (; c + 8 <= cols; c += 8) {
      __m256 xv[T];
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) xv[t] = _mm256_loadu_ps(x + t * cols + c);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m256 wv = Reader::load(w + r * a.w_row_bytes, c);
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) acc[r][t] = _mm256_fmadd_ps(wv, xv[t], acc[r][t]);
      }
    }
    if (c < cols) {
      __m256 xv[T];
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) xv[t] = load_partial(x + t * cols + c, cols - c);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m256 wv = Reader::load_partial(w + r * a.w_row_bytes, c, cols - c);
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) acc[r][t] = _mm256_fmadd_ps(wv, xv[t], acc[r][t]);
      }
    }
    float* y = a.y + t0 * a.rows + r0;  // [T, rows]
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) y[t * a.rows + r] = reduce_add_256(acc[r][t]);
  }
};

// F16 / BF16 interleaved (kernels::kHalfInterleavedRows = 32 rows per group; column c of group g is the
// group's 32 values, one 64-byte line, at w + (g * cols + c) * 64), as HalfGroupKernel in matmul_avx512.cpp
// reads it, with 8-row vectors: every output is one f32 lane summed over c in increasing order with one
// FMA per step (the scalar kernel's std::fma chain), so the bits are those of every other ISA.
template <DType D>
struct HalfGroupKernelAvx2 {
  static constexpr int kGroup = 32;
  static constexpr int kTokens = 6;  // a half tile's tokens: 2 x 6 accumulators, 2 weight vectors, a broadcast
  static constexpr int kDecodePrefetchBytes = 4096;

  static const uint8_t* group_at(const MatmulArgs& a, int64_t g) { return a.w + g * a.cols * 2 * kGroup; }

  static __m256 widen(const uint8_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    if constexpr (D == DType::F16) return _mm256_cvtph_ps(h);
    else return widen_bf16(h);
  }

  // One token, groups g and g + 1 side by side: eight FMA chains (each 8 rows), two streams of lines.
  static void tile1_pair(const MatmulArgs& a, int64_t g) {
    const int64_t cols = a.cols;
    const uint8_t* w0 = group_at(a, g);
    const uint8_t* w1 = group_at(a, g + 1);
    const float* x = a.xt != nullptr ? a.xt : a.x;  // one token: packed and row layouts coincide
    __m256 acc[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) acc[i] = _mm256_setzero_ps();
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t o = c * 2 * kGroup;
      _mm_prefetch(reinterpret_cast<const char*>(w0 + o) + kDecodePrefetchBytes, _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(w1 + o) + kDecodePrefetchBytes, _MM_HINT_T0);
      const __m256 xb = _mm256_broadcast_ss(x + c);
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) {
        acc[q] = _mm256_fmadd_ps(widen(w0 + o + 16 * q), xb, acc[q]);
        acc[4 + q] = _mm256_fmadd_ps(widen(w1 + o + 16 * q), xb, acc[4 + q]);
      }
    }
    float* y = a.y + g * kGroup;
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) _mm256_storeu_ps(y + 8 * i, acc[i]);
  }

  // Half h (rows 16h .. 16h + 15) of group g against T <= kTokens tokens whose x[t, c] lie at x + c * stride
  // + t * tstride (a packed token tile: tstride 1; x's rows: stride 1, tstride cols). With Prefetch, the pass
  // also asks for the line of each column of the group at `next` into L2, as the AVX-512 kernel's first pass
  // does.
  template <int T, bool Prefetch>
  static void half_tile(const MatmulArgs& a, int64_t g, int h, const float* x, int64_t stride, int64_t tstride,
                        int64_t t0, const uint8_t* next) {
    const int64_t cols = a.cols;
    const uint8_t* w = group_at(a, g) + h * 32;
    __m256 lo[T], hi[T];
#pragma GCC unroll 6
    for (int t = 0; t < T; ++t) lo[t] = hi[t] = _mm256_setzero_ps();
    for (int64_t c = 0; c < cols; ++c) {
      if constexpr (Prefetch) _mm_prefetch(reinterpret_cast<const char*>(next + c * 2 * kGroup), _MM_HINT_T1);
      const __m256 w0 = widen(w + c * 2 * kGroup), w1 = widen(w + c * 2 * kGroup + 16);
#pragma GCC unroll 6
      for (int t = 0; t < T; ++t) {
        const __m256 xb = _mm256_broadcast_ss(x + c * stride + t * tstride);
        lo[t] = _mm256_fmadd_ps(w0, xb, lo[t]);
        hi[t] = _mm256_fmadd_ps(w1, xb, hi[t]);
      }
    }
    float* y = a.y + t0 * a.rows + g * kGroup + h * 16;  // [T, rows]
#pragma GCC unroll 6
    for (int t = 0; t < T; ++t) {
      _mm256_storeu_ps(y + t * a.rows, lo[t]);
      _mm256_storeu_ps(y + t * a.rows + 8, hi[t]);
    }
  }

  template <bool Prefetch>
  static void half_tokens(const MatmulArgs& a, int64_t g, int h, const float* x, int64_t stride, int64_t tstride,
                          int64_t t0, int64_t n, const uint8_t* next) {
    switch (n) {
      case 1: half_tile<1, Prefetch>(a, g, h, x, stride, tstride, t0, next); return;
      case 2: half_tile<2, Prefetch>(a, g, h, x, stride, tstride, t0, next); return;
      case 3: half_tile<3, Prefetch>(a, g, h, x, stride, tstride, t0, next); return;
      case 4: half_tile<4, Prefetch>(a, g, h, x, stride, tstride, t0, next); return;
      case 5: half_tile<5, Prefetch>(a, g, h, x, stride, tstride, t0, next); return;
      default: half_tile<6, Prefetch>(a, g, h, x, stride, tstride, t0, next); return;
    }
  }

  // Rows [row_begin, row_end): whole groups. Per group, each packed token tile (kHalfTokenTile tokens, the
  // last one ragged) passes in runs of up to kTokens tokens over each half.
  static void run(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    for (int64_t r0 = row_begin; r0 < row_end; r0 += kGroup) {
      if (a.num_tokens == 1 && r0 + 2 * kGroup <= row_end) {
        tile1_pair(a, r0 / kGroup);
        r0 += kGroup;
        continue;
      }
      prefetch_ahead(a, r0, kGroup, row_begin, row_end);
      const int64_t g = r0 / kGroup;
      const bool ask_next = a.num_tokens > kPrefetchMaxTokens && r0 + 2 * kGroup <= row_end;
      const bool rows = a.xt == nullptr;  // not packed: x's rows (or one token)
      const float* xt = rows ? a.x : a.xt;
      for (int64_t k0 = 0; k0 < a.num_tokens; k0 += kHalfTokenTile) {
        const int64_t n = a.num_tokens - k0 < kHalfTokenTile ? a.num_tokens - k0 : kHalfTokenTile;
        const float* x = xt + k0 * a.cols;  // [cols, n] packed, or [n, cols]
        const int64_t stride = rows ? 1 : n, tstride = rows ? a.cols : 1;
        for (int h = 0; h < 2; ++h) {
          for (int64_t j = 0; j < n; j += kTokens) {
            const int64_t m = n - j < kTokens ? n - j : kTokens;
            const float* xj = x + j * tstride;
            if (k0 == 0 && h == 0 && j == 0 && ask_next)
              half_tokens<true>(a, g, h, xj, stride, tstride, k0 + j, m, group_at(a, g + 1));
            else
              half_tokens<false>(a, g, h, xj, stride, tstride, k0 + j, m, nullptr);
          }
        }
      }
    }
  }
};

// Interleaved Q8_0 (kernels/matmul.h: 16 rows per group; per 32-column block the 16 f16 scales, then for each
// 4-column quad the 16 rows' 4 quants as u8, q + 128), read as two 8-row halves: lane i of a vector is row
// 8h + i of the group. Per block and quad: the half's quants back to s8 (one xor) and their magnitudes,
// shared by the tile's tokens; per token, maddubs of |q| with the token's 4 quants broadcast and signed
// like q, then madd into int32 (|q| <= 128 and |x| <= 127: no pair sum saturates), so each lane sums its
// row's block dot exactly over the quads. Then the scalar kernel's float step, (dw * dx) * dot added in
// block order: every output has matmul_rows_scalar's bits, whatever the tokens and rows of a call.
struct Q8GroupKernelAvx2 {
  static constexpr int kGroup = int(kInterleavedRows);
  static constexpr int kTokens = 6;

  // y[t0 .. t0 + T, 16 g + 8 h0 .. 16 g + 8 (h0 + H)]: halves h0 .. h0 + H - 1 (H = 2: both in one pass).
  template <int T, int H>
  static void tile(const MatmulArgs& a, int64_t g, int h0, int64_t t0) {
    const int64_t num_blocks = a.cols / 32;
    const uint8_t* w = a.w + g * num_blocks * kInterleavedBlockBytes;
    const int8_t* xq = a.xq + t0 * a.cols;
    const float* xd = a.xd + t0 * num_blocks;
    const __m256i flip = _mm256_set1_epi8(char(0x80)), ones = _mm256_set1_epi16(1);
    __m256 acc[H][T];
#pragma GCC unroll 2
    for (int h = 0; h < H; ++h)
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) acc[h][t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < num_blocks; ++b) {
      const uint8_t* blk = w + b * kInterleavedBlockBytes;
      // A decode streams the group-blocks: ask for the one kStreamAheadBlocks ahead (bench_matmul q8_0i t1
      // 1.15-1.2x on Zen 3; TinyLlama q8_0 decode 1.12x, SmolLM 1.15x), unlike the VNNI kernel on Zen 5.
      if (a.num_tokens == 1) prefetch_stream(blk, kInterleavedBlockBytes, a.stream_to_l2);
      __m256i dot[H][T];
#pragma GCC unroll 8
      for (int q = 0; q < 8; ++q) {
#pragma GCC unroll 2
        for (int h = 0; h < H; ++h) {
          const __m256i ws = _mm256_xor_si256(
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2 * kGroup + q * 4 * kGroup + 32 * (h0 + h))), flip);
          const __m256i aw = _mm256_abs_epi8(ws);
#pragma GCC unroll 8
          for (int t = 0; t < T; ++t) {
            const __m256i xb = _mm256_set1_epi32(load_i32(xq + t * a.cols + b * 32 + 4 * q));  // a load: no ALU op
            const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(xb, ws)), ones);
            dot[h][t] = q == 0 ? p : _mm256_add_epi32(dot[h][t], p);
          }
        }
      }
#pragma GCC unroll 2
      for (int h = 0; h < H; ++h) {
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16 * (h0 + h))));
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          const __m256 scale = _mm256_mul_ps(dw, _mm256_set1_ps(xd[t * num_blocks + b]));
          acc[h][t] = _mm256_add_ps(acc[h][t], _mm256_mul_ps(scale, _mm256_cvtepi32_ps(dot[h][t])));
        }
      }
    }
    float* y = a.y + t0 * a.rows + g * kGroup + 8 * h0;  // [T, rows]
#pragma GCC unroll 2
    for (int h = 0; h < H; ++h)
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) _mm256_storeu_ps(y + t * a.rows + 8 * h, acc[h][t]);
  }

  // Rows [row_begin, row_end): whole groups; per group, all token tiles over its blocks while they sit in
  // cache. Six tokens per pass over one half (6 accumulators, 6 dot sums, a half's quants and their
  // magnitudes: bench_matmul q8_0i t512 level with 3 to 5 tokens, t8 1.05x); one or two tokens take both
  // halves in one pass, so a decode streams each group's bytes once.
  static void run(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    for (int64_t g = row_begin / kGroup; g < row_end / kGroup; ++g) {
      prefetch_ahead(a, g * kGroup, kGroup, row_begin, row_end);
      for (int64_t t0 = 0; t0 < a.num_tokens; t0 += kTokens) {
        switch (a.num_tokens - t0 < kTokens ? a.num_tokens - t0 : kTokens) {
          case 1: tile<1, 2>(a, g, 0, t0); break;
          case 2: tile<2, 2>(a, g, 0, t0); break;
          case 3: halves<3>(a, g, t0); break;
          case 4: halves<4>(a, g, t0); break;
          case 5: halves<5>(a, g, t0); break;
          default: halves<6>(a, g, t0); break;
        }
      }
    }
  }

  template <int T>
  static void halves(const MatmulArgs& a, int64_t g, int64_t t0) {
    tile<T, 1>(a, g, 0, t0);
    tile<T, 1>(a, g, 1, t0);
  }
};

// One value rounded to f16 and back (vcvtps2ph rounds to nearest even, as f32_to_f16 does).
inline float round_to_f16(float v) {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtps_ph(_mm_set_ss(v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
}

// (v + k) - k with k = 1.5 * 2^23: |v| < 2^22 rounded to the nearest even integer, as quantize_block_32 /
// quantize_block_256 in matmul.cpp do, then converted exactly.
inline __m256i round_even(__m256 v) {
  const __m256 k = _mm256_set1_ps(12582912.0f);
  return _mm256_cvttps_epi32(_mm256_sub_ps(_mm256_add_ps(v, k), k));
}

inline __m256 abs_ps(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

inline float reduce_max_256(__m256 v) {
  __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_max_ps(x, _mm_movehl_ps(x, x));
  return _mm_cvtss_f32(_mm_max_ss(x, _mm_movehdup_ps(x)));
}

inline int32_t reduce_add_epi32(__m256i v) {
  __m128i x = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  x = _mm_add_epi32(x, _mm_unpackhi_epi64(x, x));
  return _mm_cvtsi128_si32(_mm_add_epi32(x, _mm_shuffle_epi32(x, 1)));
}

// 16 int32 in [-128, 127] (a, then b) as 16 int8 in order.
inline __m128i narrow_16(__m256i a, __m256i b) {
  const __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xD8);
  return _mm_packs_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
}

// The Q8_0 / Q8_1 block of quantize_block_32, with the optional o lanes, c and sums over each 16.
inline void quantize_block_32(const float* xb, int8_t* qb, float* d, float* m, int32_t* o, int32_t* c, int16_t* s) {
  __m256 v[4];
  __m256 amax_v = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_loadu_ps(xb + 8 * i);
    amax_v = _mm256_max_ps(amax_v, abs_ps(v[i]));
  }
  const float amax = reduce_max_256(amax_v);
  const float scale = amax / 127.0f;
  const __m256 inv = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
  __m256i q[4];
  for (int i = 0; i < 4; ++i) q[i] = round_even(_mm256_mul_ps(v[i], inv));
  const __m128i q0 = narrow_16(q[0], q[1]), q1 = narrow_16(q[2], q[3]);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(qb), q0);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(qb + 16), q1);
  const int32_t s0 = reduce_add_epi32(_mm256_add_epi32(q[0], q[1])), s1 = reduce_add_epi32(_mm256_add_epi32(q[2], q[3]));
  const int32_t sum = s0 + s1;
  *d = round_to_f16(scale);
  *m = round_to_f16(scale * float(sum));
  if (c) *c = -128 * sum;
  if (s) {
    s[0] = int16_t(s0);
    s[1] = int16_t(s1);
  }
  if (o) {  // -16 times each 4-quant sum: pairs, then quads
    const __m256i pairs = _mm256_maddubs_epi16(_mm256_set1_epi8(1), _mm256_set_m128i(q1, q0));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o), _mm256_madd_epi16(pairs, _mm256_set1_epi16(-16)));
  }
}

// The Q8_K block of quantize_block_256, with its sums over each 16.
inline void quantize_block_256(const float* xb, int8_t* qb, float* d, int16_t* s) {
  __m256 amax_v = _mm256_setzero_ps();
  for (int i = 0; i < 256; i += 8) amax_v = _mm256_max_ps(amax_v, abs_ps(_mm256_loadu_ps(xb + i)));
  const float amax = reduce_max_256(amax_v);
  if (amax == 0.0f) {
    *d = 0.0f;
    for (int i = 0; i < 256; i += 32) _mm256_storeu_si256(reinterpret_cast<__m256i*>(qb + i), _mm256_setzero_si256());
    for (int g = 0; s && g < 16; ++g) s[g] = 0;
    return;
  }
  // The first element of largest magnitude, with its sign.
  float max = 0.0f;
  for (int i = 0; i < 256; i += 8) {
    const int hit = _mm256_movemask_ps(_mm256_cmp_ps(abs_ps(_mm256_loadu_ps(xb + i)), _mm256_set1_ps(amax), _CMP_EQ_OQ));
    if (hit != 0) {
      max = xb[i + __builtin_ctz(unsigned(hit))];
      break;
    }
  }
  const float iscale = -127.0f / max;
  const __m256 is = _mm256_set1_ps(iscale);
  const __m256i top = _mm256_set1_epi32(127);
  for (int g = 0; g < 16; ++g) {
    const __m256i a = _mm256_min_epi32(round_even(_mm256_mul_ps(is, _mm256_loadu_ps(xb + 16 * g))), top);
    const __m256i b = _mm256_min_epi32(round_even(_mm256_mul_ps(is, _mm256_loadu_ps(xb + 16 * g + 8))), top);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qb + 16 * g), narrow_16(a, b));
    if (s) s[g] = int16_t(reduce_add_epi32(_mm256_add_epi32(a, b)));
  }
  *d = 1.0f / iscale;
}

}  // namespace

void quantize_activations_avx2(const float* x, int64_t n, int block, int8_t* q, float* d, int16_t* s, float* m,
                               int32_t* o, int32_t* c) {
  quantize_blocks<quantize_block_32, quantize_block_256>(x, n, block, q, d, s, m, o, c);
}

void pack_token_tile_avx2(const float* x, int64_t cols, int64_t n, float* out) {
  // Per 8 columns and 8 tokens: the rows' 8 floats (zeros past n, masked loads past cols), transposed 8 x 8
  // (pairs of rows, pairs of pairs, then 128-bit halves), and column j's tokens stored at out + j n.
  for (int64_t c0 = 0; c0 < cols; c0 += 8) {
    const int64_t m = cols - c0 < 8 ? cols - c0 : 8;
    const __m256i load_mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(int(m)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    for (int64_t t0 = 0; t0 < n; t0 += 8) {
      const int64_t nb = n - t0 < 8 ? n - t0 : 8;
      __m256 r[8], t[8], u[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) r[i] = i < nb ? _mm256_maskload_ps(x + (t0 + i) * cols + c0, load_mask) : _mm256_setzero_ps();
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
      }
#pragma GCC unroll 2
      for (int i = 0; i < 2; ++i) {  // u[4i + k]: columns k and 4 + k of rows 4i .. 4i + 3
        u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
      }
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        if (j >= m) break;
        const __m256 col = j < 4 ? _mm256_permute2f128_ps(u[j], u[4 + j], 0x20) : _mm256_permute2f128_ps(u[j - 4], u[j], 0x31);
        float* dst = out + (c0 + j) * n + t0;
        if (nb == 8) {
          _mm256_storeu_ps(dst, col);
        } else if (nb == 4) {  // a tile of 12: tokens 8 .. 11
          _mm_storeu_ps(dst, _mm256_castps256_ps128(col));
        } else {  // not vmaskmovps: a masked store is microcoded on AMD cores
          alignas(32) float lanes[8];
          _mm256_store_ps(lanes, col);
          for (int64_t i = 0; i < nb; ++i) dst[i] = lanes[i];
        }
      }
    }
  }
}

void matmul_rows_avx2(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
  if (a.interleaved) {
    if (a.dtype == DType::Q8_0) Q8GroupKernelAvx2::run(a, row_begin, row_end);
    else if (a.dtype == DType::F16) HalfGroupKernelAvx2<DType::F16>::run(a, row_begin, row_end);
    else HalfGroupKernelAvx2<DType::BF16>::run(a, row_begin, row_end);
    return;
  }
  switch (a.dtype) {
    case DType::F32: run_tiled<Avx2Kernel<DType::F32>>(a, row_begin, row_end); return;
    case DType::F16: run_tiled<Avx2Kernel<DType::F16>>(a, row_begin, row_end); return;
    case DType::BF16: run_tiled<Avx2Kernel<DType::BF16>>(a, row_begin, row_end); return;
    case DType::Q8_0: run_tiled<Block32Kernel<Q8Format, MaddubsDot, 16>>(a, row_begin, row_end); return;
    default: run_quant<MaddubsDot, MaddScaledDot, 16>(a, row_begin, row_end); return;
  }
}

}  // namespace inflight::kernels::cpu

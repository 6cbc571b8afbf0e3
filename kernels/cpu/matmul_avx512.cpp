// AVX-512 (F/BW/VL/DQ) + F16C matmul. Compiled with -mavx512f etc.; reached only when active_isa() is
// Avx512. Float weights: one 16-lane f32 accumulator per output, fed in column order (16-column
// steps, a masked last step), then a fixed-order horizontal sum. F16 / BF16 interleaved: one f32 lane per
// output, see HalfGroupKernel. Q8_0: matmul_q8_int8.h; Q4_0 .. Q6_K: matmul_quant_int8.h.

// GCC 12 reports the _mm*_undefined_*() operands inside its own AVX-512 intrinsics as uninitialised
// (fixed in later GCCs); the warnings are noise.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "kernels/cpu/matmul_q8_int8.h"
#include "kernels/cpu/matmul_quant_int8.h"
#include "kernels/cpu/matmul_quantize_blocks.h"
#include "kernels/cpu/matmul_tiling.h"

namespace inflight::kernels::cpu {
namespace {

// Fixed-order horizontal sum: halves, then quarters, then within 128 bits.
inline float reduce_add(__m512 v) {
  return reduce_add_256(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}

inline __mmask16 tail_mask(int64_t n) { return n >= 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1); }

inline __m512 widen_bf16(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }

// Reads one weight row as 16-wide f32 slices starting at column c; load_masked zero-fills lanes
// outside mask m and reads nothing there.
template <DType D>
struct RowReader;

template <>
struct RowReader<DType::F32> {
  static __m512 load(const uint8_t* row, int64_t c) { return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + c); }
  static __m512 load_masked(const uint8_t* row, int64_t c, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + c);
  }
};

template <>
struct RowReader<DType::F16> {
  static __m512 load(const uint8_t* row, int64_t c) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * c)));
  }
  static __m512 load_masked(const uint8_t* row, int64_t c, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, row + 2 * c));
  }
};

template <>
struct RowReader<DType::BF16> {
  static __m512 load(const uint8_t* row, int64_t c) {
    return widen_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * c)));
  }
  static __m512 load_masked(const uint8_t* row, int64_t c, __mmask16 m) {
    return widen_bf16(_mm256_maskz_loadu_epi16(m, row + 2 * c));
  }
};

template <DType D>
struct Avx512Kernel {
  // Budget (32 zmm): R*T accumulators + T x slices + 1 weight slice.
  // One token: one row at a time, as Block32Kernel (a single stream the prefetchers follow; SmolLM f16
  // decode 103.5 against 69.1 tok/s with 8 rows, medians of 5 alternating).
  template <int T>
  static constexpr int rows_per_tile() { return T == 1 ? 1 : T <= 2 ? 8 : 4; }

  template <int R, int T>
  static void tile(const MatmulArgs& a, int64_t r0, int64_t t0) {
    using Reader = RowReader<D>;
    const int64_t cols = a.cols;
    const uint8_t* w = a.w + r0 * a.w_row_bytes;  // [R, w_row_bytes]
    const float* x = a.x + t0 * cols;             // [T, cols]
    __m512 acc[R][T];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();

    int64_t c = 0;
    for (; c + 16 <= cols; c += 16) {
      __m512 xv[T];
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) xv[t] = _mm512_loadu_ps(x + t * cols + c);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m512 wv = Reader::load(w + r * a.w_row_bytes, c);
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) acc[r][t] = _mm512_fmadd_ps(wv, xv[t], acc[r][t]);
      }
    }
    if (c < cols) {
      const __mmask16 m = tail_mask(cols - c);
      __m512 xv[T];
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) xv[t] = _mm512_maskz_loadu_ps(m, x + t * cols + c);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m512 wv = Reader::load_masked(w + r * a.w_row_bytes, c, m);
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) acc[r][t] = _mm512_fmadd_ps(wv, xv[t], acc[r][t]);
      }
    }
    float* y = a.y + t0 * a.rows + r0;  // [T, rows]
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) y[t * a.rows + r] = reduce_add(acc[r][t]);
  }
};

// F16 / BF16 interleaved (kernels::kHalfInterleavedRows = 32 rows per group; column c of group g is the
// group's 32 values, one 64-byte line, at w + (g * cols + c) * 64). A tile is one group x T tokens: per
// column the line widens to two 16-row vectors and each token's x[t, c] is broadcast into 2 FMAs, so every
// output is one f32 lane summed over c in increasing order with one rounding per step -- the scalar
// kernel's std::fma chain, for any T -- and lands with 15 others in one store (no horizontal sums). The
// group streams as one run of lines; the weights are widened once per token tile, not once per 4 tokens.
// A prefill (x packed, MatmulArgs::xt) runs these 32 x 12 tiles with Ahead on AMD, 16 x 24 half tiles on
// Intel (MatmulArgs::half_tiles; see half_tile).
template <DType D>
struct HalfGroupKernel {
  static constexpr int kGroup = 32;
  static constexpr int kTokenTile = int(kHalfTokenTile);  // 24 accumulators, 2 weight vectors, a broadcast
  static constexpr int kDecodePrefetchBytes = 4096;  // 64 lines ahead (1 KiB fell short; 2-8 KiB alike)
  // With Ahead, each column asks for the weight line and the x floats this many columns on, into L1. A
  // group's lines and a token tile's x come from L2 (or further), and the hardware prefetchers alone left
  // the tile waiting: Zen 5, bench_matmul f16i t512, 2 threads, medians of 5 alternating runs: 2048x2048
  // 1.03x, 5632x2048 1.05x, 576x1536 1.04x (32 columns ahead: 0.99-1.04x; 128: as 64; x alone: slower).
  // The same tile with its data in L1 reaches 93-96 % of fma_peak. Batches of 8 to 64 tokens take these
  // tiles too (their tokens are packed as well): t8 1.08-1.16x, t32 1.32-1.36x, t64 1.10-1.13x the half tiles
  // and tiles without Ahead (medians of 3 alternating runs).
  static constexpr int64_t kAheadColumns = 64;

  // Group g's columns: [cols, 32] of D, column c's line at group_at(a, g) + c * 2 * kGroup.
  static const uint8_t* group_at(const MatmulArgs& a, int64_t g) { return a.w + g * a.cols * 2 * kGroup; }

  static __m512 widen(const uint8_t* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    if constexpr (D == DType::F16) return _mm512_cvtph_ps(h);
    else return widen_bf16(h);
  }

  // With Rows, the tokens come from x's rows ([T, cols], MatmulArgs::xt unset): the same broadcasts, each from
  // its row (12 streams), and with Ahead each row asked for once per 16 columns.
  template <int T, bool Ahead = false, bool Rows = false>
  static void tile(const MatmulArgs& a, int64_t g, int64_t t0) {
    const int64_t cols = a.cols;
    const uint8_t* w = group_at(a, g);
    const float* x = (a.xt != nullptr ? a.xt : a.x) + t0 * cols;  // [cols, T] packed (T = 1: x's row)
    __m512 lo[T], hi[T];
#pragma GCC unroll 12
    for (int t = 0; t < T; ++t) lo[t] = hi[t] = _mm512_setzero_ps();
    if constexpr (Rows) {
      for (int64_t c0 = 0; c0 < cols; c0 += 16) {
        if constexpr (Ahead)
#pragma GCC unroll 12
          for (int t = 0; t < T; ++t)
            _mm_prefetch(reinterpret_cast<const char*>(x + t * cols + c0 + kAheadColumns), _MM_HINT_T0);
        for (int64_t c = c0; c < c0 + 16 && c < cols; ++c) {
          if constexpr (Ahead)
            _mm_prefetch(reinterpret_cast<const char*>(w + (c + kAheadColumns) * 2 * kGroup), _MM_HINT_T0);
          column<T>(w + c * 2 * kGroup, lo, hi, x + c, cols);
        }
      }
      store_tile<T>(a, g, t0, lo, hi);
      return;
    }
    for (int64_t c = 0; c < cols; ++c) {
      // One token: each output's FMA chain sets the pace (4 cycles a line), and the out-of-order window
      // then keeps too few lines in flight; a prefetch kDecodePrefetchBytes ahead keeps DRAM busy (Intel host,
      // this loop alone on 2 threads: 12.7 -> 18.6 GB/s, as fast as 4 interleaved groups; see bench/RESULTS.md).
      if constexpr (T == 1)
        _mm_prefetch(reinterpret_cast<const char*>(w + c * 2 * kGroup) + kDecodePrefetchBytes, _MM_HINT_T0);
      if constexpr (Ahead) {
        _mm_prefetch(reinterpret_cast<const char*>(w + (c + kAheadColumns) * 2 * kGroup), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(x + (c + kAheadColumns) * T), _MM_HINT_T0);
      }
      column<T>(w + c * 2 * kGroup, lo, hi, x + c * T, 1);
    }
    store_tile<T>(a, g, t0, lo, hi);
  }

  // One column of a tile: the group's line widened into two 16-row vectors, each multiplied with token t's
  // xc[t * stride], broadcast, into that token's two accumulators.
  template <int T>
  [[gnu::always_inline]] static void column(const uint8_t* line, __m512* lo, __m512* hi, const float* xc,
                                            int64_t stride) {
    const __m512 w0 = widen(line), w1 = widen(line + 32);
#pragma GCC unroll 12
    for (int t = 0; t < T; ++t) {
      const __m512 xb = _mm512_set1_ps(xc[t * stride]);
      lo[t] = _mm512_fmadd_ps(w0, xb, lo[t]);
      hi[t] = _mm512_fmadd_ps(w1, xb, hi[t]);
    }
  }

  template <int T>
  static void store_tile(const MatmulArgs& a, int64_t g, int64_t t0, const __m512* lo, const __m512* hi) {
    float* y = a.y + t0 * a.rows + g * kGroup;  // [T, rows]
#pragma GCC unroll 12
    for (int t = 0; t < T; ++t) {
      _mm512_storeu_ps(y + t * a.rows, lo[t]);
      _mm512_storeu_ps(y + t * a.rows + 16, hi[t]);
    }
  }

  // One token, groups g and g + 1 side by side: two streams of lines, each prefetched into L2, and four FMA
  // chains instead of two, so twice the lines are in flight per cycle of chain latency. Intel host: TinyLlama
  // f16 decode 1.08-1.18x tile<1> (alternating), and the L2 hint 1.06x the L1 one; a plain AVX-512 sum reads
  // only 5-15 % more. Each output keeps its own chain: the same bits.
  static void tile1_pair(const MatmulArgs& a, int64_t g) {
    const int64_t cols = a.cols;
    const uint8_t* w0 = group_at(a, g);
    const uint8_t* w1 = group_at(a, g + 1);
    const float* x = a.xt != nullptr ? a.xt : a.x;     // one token: packed and row layouts coincide
    __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t o = c * 2 * kGroup;
      _mm_prefetch(reinterpret_cast<const char*>(w0 + o) + kDecodePrefetchBytes, _MM_HINT_T1);
      _mm_prefetch(reinterpret_cast<const char*>(w1 + o) + kDecodePrefetchBytes, _MM_HINT_T1);
      const __m512 xb = _mm512_set1_ps(x[c]);
      acc0 = _mm512_fmadd_ps(widen(w0 + o), xb, acc0);
      acc1 = _mm512_fmadd_ps(widen(w0 + o + 32), xb, acc1);
      acc2 = _mm512_fmadd_ps(widen(w1 + o), xb, acc2);
      acc3 = _mm512_fmadd_ps(widen(w1 + o + 32), xb, acc3);
    }
    float* y = a.y + g * kGroup;
    _mm512_storeu_ps(y, acc0);
    _mm512_storeu_ps(y + 16, acc1);
    _mm512_storeu_ps(y + 32, acc2);
    _mm512_storeu_ps(y + 48, acc3);
  }

  // Half h (rows 16h .. 16h + 15) of group g against the two packed token tiles at t0: 24 accumulators,
  // one weight vector, a broadcast. Per column one widening feeds 24 FMAs instead of 12 (Intel: the widening
  // takes 2 FMA-port uops; the tile loop alone, one thread, hot: 1.11-1.14x the 32 x 12 tile). The same
  // lane chains, so the same bits. On Zen 5 the 24 broadcasts a column cost more than the second widening:
  // bench_matmul f16i t512, 2 threads, 3 alternating runs, the 32 x 12 tile without prefetches 0.97-1.07x
  // (2048x2048), 1.07-1.09x (5632x2048), 1.03-1.08x (576x1536) the half tiles; with Ahead, medians of 5
  // alternating runs, 1.07x, 1.13x, 1.06x (2048x5632), 1.15x (576x576), 1.12x (3072x576), 1.13x, at 80-92 %
  // of fma_peak. The half tiles with the same prefetches were no faster.
  // With Prefetch, the pass also asks for the line of each column of the group at `next` (into L2, one line
  // per column): a prefill reads a group's weights from DRAM in its first pass and from L2 in the three or
  // more after, and the hardware prefetchers alone left that first pass waiting (Intel host, 2 threads:
  // TinyLlama f16 prefill 1.14x over 14 alternating rounds, SmolLM f16 1.04x over 16; see bench/RESULTS.md).
  template <bool Prefetch>
  static void half_tile(const MatmulArgs& a, int64_t g, int h, int64_t t0, const uint8_t* next) {
    constexpr int T = 2 * kTokenTile;
    const int64_t cols = a.cols;
    const uint8_t* w = group_at(a, g) + h * 32;  // this half of each column's line
    const float* x0 = a.xt + t0 * cols;           // [cols, 12] tokens t0 ..
    const float* x1 = x0 + kTokenTile * cols;     // [cols, 12] tokens t0 + 12 ..
    __m512 acc[T];
#pragma GCC unroll 24
    for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t c = 0; c < cols; ++c) {
      if constexpr (Prefetch) _mm_prefetch(reinterpret_cast<const char*>(next + c * 2 * kGroup), _MM_HINT_T1);
      const __m512 wv = widen(w + c * 2 * kGroup);
#pragma GCC unroll 12
      for (int t = 0; t < kTokenTile; ++t) acc[t] = _mm512_fmadd_ps(wv, _mm512_set1_ps(x0[c * kTokenTile + t]), acc[t]);
#pragma GCC unroll 12
      for (int t = 0; t < kTokenTile; ++t)
        acc[kTokenTile + t] = _mm512_fmadd_ps(wv, _mm512_set1_ps(x1[c * kTokenTile + t]), acc[kTokenTile + t]);
    }
    float* y = a.y + t0 * a.rows + g * kGroup + h * 16;  // [T, rows]
#pragma GCC unroll 24
    for (int t = 0; t < T; ++t) _mm512_storeu_ps(y + t * a.rows, acc[t]);
  }

  // Rows [row_begin, row_end): whole groups.
  static void run(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    for (int64_t r0 = row_begin; r0 < row_end; r0 += kGroup) {
      if (a.num_tokens == 1 && r0 + 2 * kGroup <= row_end) {
        tile1_pair(a, r0 / kGroup);
        r0 += kGroup;
        continue;
      }
      prefetch_ahead(a, r0, kGroup, row_begin, row_end);
      const int64_t g = r0 / kGroup;
      int64_t t0 = 0;
      if (a.xt != nullptr && a.half_tiles) {
        // Above kPrefetchMaxTokens (where prefetch_ahead stops), the group's first pass asks for the next one.
        const bool ask_next = a.num_tokens > kPrefetchMaxTokens && r0 + 2 * kGroup <= row_end;
        for (; t0 + 2 * kTokenTile <= a.num_tokens; t0 += 2 * kTokenTile) {
          if (t0 == 0 && ask_next) half_tile<true>(a, g, 0, t0, group_at(a, g + 1));
          else half_tile<false>(a, g, 0, t0, nullptr);
          half_tile<false>(a, g, 1, t0, nullptr);
        }
      }
      if (a.xt != nullptr && !a.half_tiles) tiles<true>(a, g, t0);
      else if (a.xt == nullptr && a.num_tokens > 1) tiles<true, true>(a, g, t0);  // not packed: from x's rows
      else tiles<false>(a, g, t0);
    }
  }

  // Group g against tokens [t0, num_tokens): 12-token tiles, then the ragged rest.
  template <bool Ahead, bool Rows = false>
  static void tiles(const MatmulArgs& a, int64_t g, int64_t t0) {
    for (; t0 + kTokenTile <= a.num_tokens; t0 += kTokenTile) tile<kTokenTile, Ahead, Rows>(a, g, t0);
    switch (a.num_tokens - t0) {
      case 0: break;
      case 1: tile<1>(a, g, t0); break;
      case 2: tile<2, Ahead, Rows>(a, g, t0); break;
      case 3: tile<3, Ahead, Rows>(a, g, t0); break;
      case 4: tile<4, Ahead, Rows>(a, g, t0); break;
      case 5: tile<5, Ahead, Rows>(a, g, t0); break;
      case 6: tile<6, Ahead, Rows>(a, g, t0); break;
      case 7: tile<7, Ahead, Rows>(a, g, t0); break;
      case 8: tile<8, Ahead, Rows>(a, g, t0); break;
      case 9: tile<9, Ahead, Rows>(a, g, t0); break;
      case 10: tile<10, Ahead, Rows>(a, g, t0); break;
      default: tile<11, Ahead, Rows>(a, g, t0); break;
    }
  }
};

// One value rounded to f16 and back (vcvtps2ph rounds to nearest even, as f32_to_f16 does).
inline float round_to_f16(float v) {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtps_ph(_mm_set_ss(v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
}

// (v + k) - k with k = 1.5 * 2^23: |v| < 2^22 rounded to the nearest even integer, as quantize_block_32 /
// quantize_block_256 in matmul.cpp do, then converted exactly.
inline __m512i round_even(__m512 v) {
  const __m512 k = _mm512_set1_ps(12582912.0f);
  return _mm512_cvttps_epi32(_mm512_sub_ps(_mm512_add_ps(v, k), k));
}

inline __m512 abs_ps(__m512 v) { return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7fffffff))); }

// The Q8_0 / Q8_1 block of quantize_block_32, with the optional o lanes, c and sums over each 16.
inline void quantize_block_32(const float* xb, int8_t* qb, float* d, float* m, int32_t* o, int32_t* c, int16_t* s) {
  const __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(abs_ps(v0), abs_ps(v1)));
  const float scale = amax / 127.0f;
  const __m512 inv = _mm512_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
  const __m512i i0 = round_even(_mm512_mul_ps(v0, inv)), i1 = round_even(_mm512_mul_ps(v1, inv));
  const __m128i q0 = _mm512_cvtepi32_epi8(i0), q1 = _mm512_cvtepi32_epi8(i1);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(qb), q0);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(qb + 16), q1);
  const int32_t sum = _mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1));
  *d = round_to_f16(scale);
  *m = round_to_f16(scale * float(sum));
  if (c) *c = -128 * sum;
  if (s) {
    s[0] = int16_t(_mm512_reduce_add_epi32(i0));
    s[1] = int16_t(_mm512_reduce_add_epi32(i1));
  }
  if (o) {  // -16 times each 4-quant sum: pairs, then quads
    const __m256i q = _mm256_set_m128i(q1, q0);
    const __m256i pairs = _mm256_maddubs_epi16(_mm256_set1_epi8(1), q);
    const __m256i quads = _mm256_madd_epi16(pairs, _mm256_set1_epi16(-16));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o), quads);
  }
}

// The Q8_K block of quantize_block_256, with its sums over each 16.
inline void quantize_block_256(const float* xb, int8_t* qb, float* d, int16_t* s) {
  __m512 amax_v = _mm512_setzero_ps();
  for (int i = 0; i < 256; i += 16) amax_v = _mm512_max_ps(amax_v, abs_ps(_mm512_loadu_ps(xb + i)));
  const float amax = _mm512_reduce_max_ps(amax_v);
  if (amax == 0.0f) {
    *d = 0.0f;
    for (int i = 0; i < 256; i += 64) _mm512_storeu_si512(qb + i, _mm512_setzero_si512());
    for (int g = 0; s && g < 16; ++g) s[g] = 0;
    return;
  }
  // The first element of largest magnitude, with its sign.
  float max = 0.0f;
  for (int i = 0; i < 256; i += 16) {
    const __mmask16 hit = _mm512_cmp_ps_mask(abs_ps(_mm512_loadu_ps(xb + i)), _mm512_set1_ps(amax), _CMP_EQ_OQ);
    if (hit != 0) {
      max = xb[i + __builtin_ctz(hit)];
      break;
    }
  }
  const float iscale = -127.0f / max;
  const __m512 is = _mm512_set1_ps(iscale);
  for (int g = 0; g < 16; ++g) {
    const __m512i q = _mm512_min_epi32(round_even(_mm512_mul_ps(is, _mm512_loadu_ps(xb + 16 * g))), _mm512_set1_epi32(127));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qb + 16 * g), _mm512_cvtepi32_epi8(q));
    if (s) s[g] = int16_t(_mm512_reduce_add_epi32(q));
  }
  *d = 1.0f / iscale;
}

}  // namespace

void quantize_activations_avx512(const float* x, int64_t n, int block, int8_t* q, float* d, int16_t* s, float* m,
                                 int32_t* o, int32_t* c) {
  quantize_blocks<quantize_block_32, quantize_block_256>(x, n, block, q, d, s, m, o, c);
}

void pack_token_tile_avx512(const float* x, int64_t cols, int64_t n, float* out) {
  // Per 16 columns: the n rows' 16 floats (zeros past n), transposed 16 x 16 in four rounds of two-input
  // shuffles (pairs of rows, pairs of pairs, then 128-bit lanes twice), and column j's first n lanes
  // stored at out + j n.
  const __mmask16 store_mask = __mmask16((1u << n) - 1);
  for (int64_t c0 = 0; c0 < cols; c0 += 16) {
    const int64_t m = cols - c0 < 16 ? cols - c0 : 16;
    const __mmask16 load_mask = __mmask16((1u << m) - 1);
    __m512 r[16], t[16], u[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) r[i] = i < n ? _mm512_maskz_loadu_ps(load_mask, x + i * cols + c0) : _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {  // t[2i], t[2i + 1]: rows 2i, 2i + 1 interleaved, columns 4L + {0, 1} / {2, 3}
      t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
      t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {  // u[4i + k], 128-bit lane L: column 4L + k of rows 4i .. 4i + 3
      const __m512d a0 = _mm512_castps_pd(t[4 * i]), a1 = _mm512_castps_pd(t[4 * i + 1]);
      const __m512d b0 = _mm512_castps_pd(t[4 * i + 2]), b1 = _mm512_castps_pd(t[4 * i + 3]);
      u[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a0, b0));
      u[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a0, b0));
      u[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(a1, b1));
      u[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(a1, b1));
    }
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {  // columns k, 4 + k, 8 + k, 12 + k
      const __m512 v0 = _mm512_shuffle_f32x4(u[k], u[4 + k], 0x88), v1 = _mm512_shuffle_f32x4(u[k], u[4 + k], 0xdd);
      const __m512 v2 = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0x88);
      const __m512 v3 = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0xdd);
      const __m512 col[4] = {_mm512_shuffle_f32x4(v0, v2, 0x88), _mm512_shuffle_f32x4(v1, v3, 0x88),
                             _mm512_shuffle_f32x4(v0, v2, 0xdd), _mm512_shuffle_f32x4(v1, v3, 0xdd)};
#pragma GCC unroll 4
      for (int l = 0; l < 4; ++l)
        if (4 * l + k < m) _mm512_mask_storeu_ps(out + (c0 + 4 * l + k) * n, store_mask, col[l]);
    }
  }
}

void matmul_rows_avx512(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
  if (a.interleaved) {
    if (a.dtype == DType::F16) HalfGroupKernel<DType::F16>::run(a, row_begin, row_end);
    else HalfGroupKernel<DType::BF16>::run(a, row_begin, row_end);
    return;
  }
  switch (a.dtype) {
    case DType::F32: run_tiled<Avx512Kernel<DType::F32>>(a, row_begin, row_end); return;
    case DType::F16: run_tiled<Avx512Kernel<DType::F16>>(a, row_begin, row_end); return;
    case DType::BF16: run_tiled<Avx512Kernel<DType::BF16>>(a, row_begin, row_end); return;
    case DType::Q8_0: run_tiled<Block32Kernel<Q8Format, MaddubsDot, 32>>(a, row_begin, row_end); return;
    default: run_quant<MaddubsDot, MaddScaledDot, 32>(a, row_begin, row_end); return;
  }
}

}  // namespace inflight::kernels::cpu

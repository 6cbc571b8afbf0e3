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
template <DType D>
struct HalfGroupKernel {
  static constexpr int kGroup = 32;
  static constexpr int kTokenTile = int(kHalfTokenTile);  // 24 accumulators, 2 weight vectors, a broadcast

  static __m512 widen(const uint8_t* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    if constexpr (D == DType::F16) return _mm512_cvtph_ps(h);
    else return widen_bf16(h);
  }

  template <int T>
  static void tile(const MatmulArgs& a, int64_t g, int64_t t0) {
    const int64_t cols = a.cols;
    const uint8_t* w = a.w + g * cols * 2 * kGroup;  // [cols, 32] of D
    const float* x = (a.xt != nullptr ? a.xt : a.x) + t0 * cols;  // [cols, T] packed (T = 1: x's row)
    __m512 lo[T], hi[T];
#pragma GCC unroll 12
    for (int t = 0; t < T; ++t) lo[t] = hi[t] = _mm512_setzero_ps();
    for (int64_t c = 0; c < cols; ++c) {
      const __m512 w0 = widen(w + c * 2 * kGroup), w1 = widen(w + c * 2 * kGroup + 32);
#pragma GCC unroll 12
      for (int t = 0; t < T; ++t) {
        const __m512 xb = _mm512_set1_ps(x[c * T + t]);
        lo[t] = _mm512_fmadd_ps(w0, xb, lo[t]);
        hi[t] = _mm512_fmadd_ps(w1, xb, hi[t]);
      }
    }
    float* y = a.y + t0 * a.rows + g * kGroup;  // [T, rows]
#pragma GCC unroll 12
    for (int t = 0; t < T; ++t) {
      _mm512_storeu_ps(y + t * a.rows, lo[t]);
      _mm512_storeu_ps(y + t * a.rows + 16, hi[t]);
    }
  }

  // Rows [row_begin, row_end): whole groups.
  static void run(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
    for (int64_t r0 = row_begin; r0 < row_end; r0 += kGroup) {
      prefetch_ahead(a, r0, kGroup, row_begin, row_end);
      const int64_t g = r0 / kGroup;
      int64_t t0 = 0;
      for (; t0 + kTokenTile <= a.num_tokens; t0 += kTokenTile) tile<kTokenTile>(a, g, t0);
      switch (a.num_tokens - t0) {
        case 0: break;
        case 1: tile<1>(a, g, t0); break;
        case 2: tile<2>(a, g, t0); break;
        case 3: tile<3>(a, g, t0); break;
        case 4: tile<4>(a, g, t0); break;
        case 5: tile<5>(a, g, t0); break;
        case 6: tile<6>(a, g, t0); break;
        case 7: tile<7>(a, g, t0); break;
        case 8: tile<8>(a, g, t0); break;
        case 9: tile<9>(a, g, t0); break;
        case 10: tile<10>(a, g, t0); break;
        default: tile<11>(a, g, t0); break;
      }
    }
  }
};

}  // namespace

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

// AVX-512 (F/BW/VL/DQ) + F16C matmul. Compiled with -mavx512f etc.; reached only when active_isa() is
// Avx512. Float weights: one 16-lane f32 accumulator per output, fed in column order (16-column
// steps, a masked last step), then a fixed-order horizontal sum. Q8_0: matmul_q8_int8.h; Q4_0 .. Q6_K: matmul_quant_int8.h.

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

}  // namespace

void matmul_rows_avx512(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
  switch (a.dtype) {
    case DType::F32: run_tiled<Avx512Kernel<DType::F32>>(a, row_begin, row_end); return;
    case DType::F16: run_tiled<Avx512Kernel<DType::F16>>(a, row_begin, row_end); return;
    case DType::BF16: run_tiled<Avx512Kernel<DType::BF16>>(a, row_begin, row_end); return;
    case DType::Q8_0: run_tiled<Block32Kernel<Q8Format, MaddubsDot, 32>>(a, row_begin, row_end); return;
    default: run_quant<MaddubsDot, MaddScaledDot, 32>(a, row_begin, row_end); return;
  }
}

}  // namespace inflight::kernels::cpu

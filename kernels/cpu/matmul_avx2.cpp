// AVX2 + FMA + F16C matmul. Compiled with -mavx2 -mfma -mf16c; reached only when active_isa() is Avx2.
// Float weights: one 8-lane f32 accumulator per output, fed in column order (8-column steps, a
// zero-padded last step), then a fixed-order horizontal sum. Q8_0: matmul_q8_int8.h; Q4_0 .. Q6_K:
// matmul_quant_int8.h.
#include <immintrin.h>

#include "kernels/cpu/matmul_q8_int8.h"
#include "kernels/cpu/matmul_quant_int8.h"
#include "kernels/cpu/matmul_tiling.h"


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

}  // namespace

void matmul_rows_avx2(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
  switch (a.dtype) {
    case DType::F32: run_tiled<Avx2Kernel<DType::F32>>(a, row_begin, row_end); return;
    case DType::F16: run_tiled<Avx2Kernel<DType::F16>>(a, row_begin, row_end); return;
    case DType::BF16: run_tiled<Avx2Kernel<DType::BF16>>(a, row_begin, row_end); return;
    case DType::Q8_0: run_tiled<Block32Kernel<Q8Format, MaddubsDot, 16>>(a, row_begin, row_end); return;
    default: run_quant<MaddubsDot, MaddScaledDot, 16>(a, row_begin, row_end); return;
  }
}

}  // namespace inflight::kernels::cpu

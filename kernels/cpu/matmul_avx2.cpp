// AVX2 + FMA + F16C matmul. Compiled with -mavx2 -mfma -mf16c; reached only when active_isa() is Avx2.
// Per output: one 8-lane f32 accumulator fed in column order (8-column steps, a zero-padded last
// step), then a fixed horizontal sum.
#include <immintrin.h>

#include "kernels/cpu/matmul_tiling.h"

namespace inflight::kernels::cpu {
namespace {

constexpr int kQ8Bytes = 34;  // f16 scale + 32 int8, see dtype.h

inline float reduce_add(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// The first n (< 8) floats at p, zero-padded to 8.
inline __m256 load_partial(const float* p, int64_t n) {
  alignas(32) float buf[8] = {};
  for (int64_t i = 0; i < n; ++i) buf[i] = p[i];
  return _mm256_load_ps(buf);
}

inline __m256 widen_bf16(__m128i h) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); }

// Reads one weight row as 8-wide f32 slices. `Block` is per-32-column state (the Q8_0 scale).
template <DType D>
struct RowReader;

template <>
struct RowReader<DType::F32> {
  struct Block {};
  static Block block(const uint8_t*, int64_t) { return {}; }
  static __m256 load(const uint8_t* row, const Block&, int64_t c) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + c);
  }
  static __m256 load_partial_row(const uint8_t* row, int64_t c, int64_t n) {
    return load_partial(reinterpret_cast<const float*>(row) + c, n);
  }
};

template <>
struct RowReader<DType::F16> {
  struct Block {};
  static Block block(const uint8_t*, int64_t) { return {}; }
  static __m256 load(const uint8_t* row, const Block&, int64_t c) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * c)));
  }
  static __m256 load_partial_row(const uint8_t* row, int64_t c, int64_t n) {
    alignas(16) uint16_t buf[8] = {};
    __builtin_memcpy(buf, row + 2 * c, size_t(n) * 2);
    return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(buf)));
  }
};

template <>
struct RowReader<DType::BF16> {
  struct Block {};
  static Block block(const uint8_t*, int64_t) { return {}; }
  static __m256 load(const uint8_t* row, const Block&, int64_t c) {
    return widen_bf16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * c)));
  }
  static __m256 load_partial_row(const uint8_t* row, int64_t c, int64_t n) {
    alignas(16) uint16_t buf[8] = {};
    __builtin_memcpy(buf, row + 2 * c, size_t(n) * 2);
    return widen_bf16(_mm_load_si128(reinterpret_cast<const __m128i*>(buf)));
  }
};

template <DType D>
struct Avx2Kernel {
  // Register budget (16 ymm): R*T accumulators + T x slices + R scales (Q8_0) + 1 weight slice.
  template <int T>
  static constexpr int rows_per_tile() {
    if constexpr (T >= 3) return 2;
    if constexpr (D == DType::Q8_0) return 4;
    return T == 1 ? 8 : 4;
  }

  template <int R, int T>
  static void tile(const MatmulArgs& a, int64_t r0, int64_t t0) {
    using Reader = RowReader<D>;
    const int64_t cols = a.cols;
    const int64_t w_row_bytes = a.w_row_bytes;
    const uint8_t* w = a.w + r0 * w_row_bytes;      // [R, w_row_bytes]
    const float* x = a.x + t0 * cols;               // [T, cols]
    float* y = a.y + t0 * a.rows + r0;              // [T, rows]
    const int64_t x_stride = cols, y_stride = a.rows;
    __m256 acc[R][T];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();

    int64_t c = 0;
    for (; c + 32 <= cols; c += 32) {
      typename Reader::Block blk[R];
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) blk[r] = Reader::block(w + r * w_row_bytes, c);
#pragma GCC unroll 4
      for (int h = 0; h < 32; h += 8) {
        __m256 xv[T];
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) xv[t] = _mm256_loadu_ps(x + t * x_stride + c + h);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const __m256 wv = Reader::load(w + r * w_row_bytes, blk[r], c + h);
#pragma GCC unroll 4
          for (int t = 0; t < T; ++t) acc[r][t] = _mm256_fmadd_ps(wv, xv[t], acc[r][t]);
        }
      }
    }
    {
      const typename Reader::Block none{};
      for (; c + 8 <= cols; c += 8) {
        __m256 xv[T];
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) xv[t] = _mm256_loadu_ps(x + t * x_stride + c);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const __m256 wv = Reader::load(w + r * w_row_bytes, none, c);
#pragma GCC unroll 4
          for (int t = 0; t < T; ++t) acc[r][t] = _mm256_fmadd_ps(wv, xv[t], acc[r][t]);
        }
      }
      if (c < cols) {
        __m256 xv[T];
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) xv[t] = load_partial(x + t * x_stride + c, cols - c);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const __m256 wv = Reader::load_partial_row(w + r * w_row_bytes, c, cols - c);
#pragma GCC unroll 4
          for (int t = 0; t < T; ++t) acc[r][t] = _mm256_fmadd_ps(wv, xv[t], acc[r][t]);
        }
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) y[t * y_stride + r] = reduce_add(acc[r][t]);
  }
};

}  // namespace

void matmul_rows_avx2(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
  switch (a.dtype) {
    case DType::F32: run_tiled<Avx2Kernel<DType::F32>>(a, row_begin, row_end); return;
    case DType::F16: run_tiled<Avx2Kernel<DType::F16>>(a, row_begin, row_end); return;
    case DType::BF16: run_tiled<Avx2Kernel<DType::BF16>>(a, row_begin, row_end); return;
    case DType::Q8_0: run_tiled<Avx2Kernel<DType::Q8_0>>(a, row_begin, row_end); return;
  }
}

}  // namespace inflight::kernels::cpu

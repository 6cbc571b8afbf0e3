// AVX-512 (F/BW/VL/DQ) + F16C matmul. Compiled with -mavx512f etc.; reached only when active_isa() is
// Avx512. Per output: one 16-lane f32 accumulator fed in column order (16-column steps, a masked last
// step), then a fixed-order horizontal sum.
// GCC 12 reports the _mm*_undefined_*() operands inside its own AVX-512 intrinsics as uninitialised
// (fixed in later GCCs); the warnings are noise.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "kernels/cpu/matmul_tiling.h"

namespace inflight::kernels::cpu {
namespace {

constexpr int kQ8Bytes = 34;  // f16 scale + 32 int8, see dtype.h

// Fixed-order horizontal sum: halves, then quarters, then within 128 bits.
inline float reduce_add(__m512 v) {
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

inline __m512 cvt_f16(__m256i h) { return _mm512_cvtph_ps(h); }

inline __mmask16 tail_mask(int64_t n) { return n >= 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1); }

// Reads one weight row as 16-wide f32 slices. `Block` is per-32-column state (the Q8_0 scale).
template <DType D>
struct RowReader;

template <>
struct RowReader<DType::F32> {
  struct Block {};
  static Block block(const uint8_t*, int64_t) { return {}; }
  static __m512 load(const uint8_t* row, const Block&, int64_t c) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + c);
  }
  static __m512 load_masked(const uint8_t* row, int64_t c, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + c);
  }
};

template <>
struct RowReader<DType::F16> {
  struct Block {};
  static Block block(const uint8_t*, int64_t) { return {}; }
  static __m512 load(const uint8_t* row, const Block&, int64_t c) {
    return cvt_f16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * c)));
  }
  static __m512 load_masked(const uint8_t* row, int64_t c, __mmask16 m) {
    return cvt_f16(_mm256_maskz_loadu_epi16(m, row + 2 * c));
  }
};

template <>
struct RowReader<DType::BF16> {
  struct Block {};
  static Block block(const uint8_t*, int64_t) { return {}; }
  static __m512 widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
  static __m512 load(const uint8_t* row, const Block&, int64_t c) {
    return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * c)));
  }
  static __m512 load_masked(const uint8_t* row, int64_t c, __mmask16 m) {
    return widen(_mm256_maskz_loadu_epi16(m, row + 2 * c));
  }
};

template <DType D>
struct Avx512Kernel {
  // Register budget (32 zmm): R*T accumulators + T x slices + R scales (Q8_0) + 1 weight slice.
  template <int T>
  static constexpr int rows_per_tile() { return T <= 2 ? 8 : 4; }

  template <int R, int T>
  static void tile(const MatmulArgs& a, int64_t r0, int64_t t0) {
    using Reader = RowReader<D>;
    const int64_t cols = a.cols;
    const int64_t w_row_bytes = a.w_row_bytes;
    const uint8_t* w = a.w + r0 * w_row_bytes;      // [R, w_row_bytes]
    const float* x = a.x + t0 * cols;               // [T, cols]
    float* y = a.y + t0 * a.rows + r0;              // [T, rows]
    const int64_t x_stride = cols, y_stride = a.rows;
    __m512 acc[R][T];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();

    int64_t c = 0;
    for (; c + 32 <= cols; c += 32) {
      typename Reader::Block blk[R];
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) blk[r] = Reader::block(w + r * w_row_bytes, c);
#pragma GCC unroll 2
      for (int h = 0; h < 32; h += 16) {
        __m512 xv[T];
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) xv[t] = _mm512_loadu_ps(x + t * x_stride + c + h);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const __m512 wv = Reader::load(w + r * w_row_bytes, blk[r], c + h);
#pragma GCC unroll 4
          for (int t = 0; t < T; ++t) acc[r][t] = _mm512_fmadd_ps(wv, xv[t], acc[r][t]);
        }
      }
    }
    {
      for (; c < cols; c += 16) {
        const __mmask16 m = tail_mask(cols - c);
        __m512 xv[T];
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) xv[t] = _mm512_maskz_loadu_ps(m, x + t * x_stride + c);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const __m512 wv = Reader::load_masked(w + r * w_row_bytes, c, m);
#pragma GCC unroll 4
          for (int t = 0; t < T; ++t) acc[r][t] = _mm512_fmadd_ps(wv, xv[t], acc[r][t]);
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

void matmul_rows_avx512(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
  switch (a.dtype) {
    case DType::F32: run_tiled<Avx512Kernel<DType::F32>>(a, row_begin, row_end); return;
    case DType::F16: run_tiled<Avx512Kernel<DType::F16>>(a, row_begin, row_end); return;
    case DType::BF16: run_tiled<Avx512Kernel<DType::BF16>>(a, row_begin, row_end); return;
    case DType::Q8_0: run_tiled<Avx512Kernel<DType::Q8_0>>(a, row_begin, row_end); return;
  }
}

}  // namespace inflight::kernels::cpu

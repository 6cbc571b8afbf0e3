// AVX2 + FMA + F16C matmul. Compiled with -mavx2 -mfma -mf16c; reached only when active_isa() is Avx2.
// Float weights: one 8-lane f32 accumulator per output, fed in column order (8-column steps, a
// zero-padded last step), then a fixed-order horizontal sum. Q8_0: matmul_q8_int8.h; Q4_0 .. Q6_K:
// matmul_quant_int8.h.
#include <immintrin.h>

#include "kernels/cpu/matmul_q8_int8.h"
#include "kernels/cpu/matmul_quant_int8.h"
#include "kernels/cpu/matmul_quantize_blocks.h"
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

// AVX2 + FMA + F16C tile routine (8 lanes). Compiled with -mavx2 -mfma -mf16c; reached only when
// active_isa() is Avx2. Intrinsics only, everything in an anonymous namespace (attention_tile.h).
#include <immintrin.h>

#include "kernels/cpu/attention_tile_impl.h"

namespace inflight::kernels::cpu {
namespace {

struct Avx2 {
  static constexpr int W = 8;
  static constexpr int kMaxQB = 4;       // queries per score / weight block (4 x 2 keys = 8 sums)
  static constexpr int kAccBudget = 8;   // accumulators of a weight block (16 ymm registers)
  using V = __m256;
  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static __m128 fold(V v) { return _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)); }
  static float hsum(V v) {
    __m128 x = fold(v);
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
  }
  static float hmax(V v) {
    __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_max_ps(x, _mm_movehl_ps(x, x));
    x = _mm_max_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
  }
  // Lane t = sum of acc[t]: pairwise hadds within 128-bit halves, then the two halves added.
  static V transpose_sum(const V* a) {
    const V t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
    const V t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
    const V u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
  }
  // Stores lanes [r * KB, (r + 1) * KB) of v.
  template <int KB>
  static void store_lanes(float* dst, V v, int r) {
    if constexpr (KB == 8) {
      _mm256_storeu_ps(dst, v);
    } else if constexpr (KB == 4) {
      _mm_storeu_ps(dst, r == 0 ? _mm256_castps256_ps128(v) : _mm256_extractf128_ps(v, 1));
    } else {
      const __m128 half = r < 2 ? _mm256_castps256_ps128(v) : _mm256_extractf128_ps(v, 1);
      _mm_storel_pi(reinterpret_cast<__m64*>(dst), r % 2 == 0 ? half : _mm_movehl_ps(half, half));
    }
  }
  // Cephes expf: x = n ln2 + r, |r| <= ln2 / 2, degree-6 polynomial, times 2^n; 0 below -87.3.
  static V exp(V x) {
    const V small = _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.7f));
    const V n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    V r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    V y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(small, _mm256_mul_ps(y, _mm256_castsi256_ps(e)));
  }
  static V widen_f32(const uint8_t* p) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
  static V widen_f16(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static V widen_bf16(const uint8_t* p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  static V widen_i8(const uint8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  // e4m3 code c -> f16 bits ((c & 0x80) << 8) | ((c & 0x7f) << 7) (kv_dtype.h), value / 256: the
  // sign-extended code shifted by 7 has the sign in bits 15 and 14, the magnitude in bits 7-13; clear 14.
  static V widen_e4m3(const uint8_t* p) {
    const __m128i c = _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    return _mm256_cvtph_ps(_mm_and_si128(_mm_slli_epi16(c, 7), _mm_set1_epi16(int16_t(0xbfff))));
  }
  static V widen_e5m2(const uint8_t* p) {
    const __m128i c = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    return _mm256_cvtph_ps(_mm_slli_epi16(c, 8));
  }
};

// The same with 2-query blocks, for tiles of at most 2 queries: the 4-query routine's larger body runs
// them slower (measured per key in L2: f16 R = 2 69 -> 76 cycles, int8 67 -> 85), and the blocks give
// every query the same sums either way.
struct Avx2Pairs : Avx2 {
  static constexpr int kMaxQB = 2;
};

}  // namespace

void attend_tile_avx2(const TileArgs& a) {
  if (a.num_queries <= 2) TileKernel<Avx2Pairs>::attend(a);
  else TileKernel<Avx2>::attend(a);
}
void merge_state_avx2(SoftmaxState& a, const SoftmaxState& b, int dim) { TileKernel<Avx2>::merge(a, b, dim); }

void f16_row_f16c(const float* x, int n, uint16_t* out) {
  int i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) out[i] = uint16_t(_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(x[i]), _MM_FROUND_TO_NEAREST_INT), 0));
}

}  // namespace inflight::kernels::cpu

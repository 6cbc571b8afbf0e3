// The AVX-512 (F/BW/VL/DQ) + F16C traits of the tile routine (attention_tile_impl.h), shared by
// attention_avx512.cpp and attention_avx512_vnni.cpp. Intrinsics only, in an anonymous namespace: include
// it only from files compiled with the AVX-512 flags (see attention_tile.h).
#pragma once

// GCC 12 reports the _mm*_undefined_*() operands inside its own AVX-512 intrinsics as uninitialised
// (fixed in later GCCs); the warnings are noise.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "kernels/cpu/attention_tile_impl.h"

namespace inflight::kernels::cpu {
namespace {

struct Avx512 {
  static constexpr int W = 16;
  static constexpr int kMaxQB = 4;       // queries per score / weight block (4 x 4 keys = 16 sums)
  static constexpr int kAccBudget = 16;  // accumulators of a weight block (32 zmm registers)
  using V = __m512;
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  // out[t] = ptrs[t][off] for t < 8 when the 8 pointers are consecutive floats (the Int8 row scales of one
  // block): one compare of the pointers and one copy instead of 8 dependent loads. False otherwise.
  static bool copy_if_contiguous8(const float* const* ptrs, int64_t off, float* out) {
    const __m512i p = _mm512_loadu_si512(ptrs);
    const __m512i want = _mm512_add_epi64(_mm512_set1_epi64(reinterpret_cast<int64_t>(ptrs[0])),
                                          _mm512_setr_epi64(0, 4, 8, 12, 16, 20, 24, 28));
    if (_mm512_cmpneq_epi64_mask(p, want) != 0) return false;
    _mm256_storeu_ps(out, _mm256_loadu_ps(ptrs[0] + off));
    return true;
  }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static float hsum(V v) { return _mm512_reduce_add_ps(v); }
  static float hmax(V v) { return _mm512_reduce_max_ps(v); }

  // Lane t = sum of acc[t], by halving: within 128-bit lanes (ps, then pd unpacks), then across them
  // (two rounds of 128-bit shuffles). 45 instructions for 16 sums.
  static V pair_ps(V a, V b) { return _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b)); }
  static V pair_pd(V a, V b) {
    const __m512d x = _mm512_castps_pd(a), y = _mm512_castps_pd(b);
    return _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)), _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
  }
  static V pair_lanes(V a, V b) {
    return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x88), _mm512_shuffle_f32x4(a, b, 0xdd));
  }
  static V transpose_sum(const V* a) {
    V e[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) e[k] = pair_pd(pair_ps(a[4 * k], a[4 * k + 1]), pair_ps(a[4 * k + 2], a[4 * k + 3]));
    return pair_lanes(pair_lanes(e[0], e[1]), pair_lanes(e[2], e[3]));
  }
  // Stores lanes [r * KB, (r + 1) * KB) of v.
  template <int KB>
  static void store_lanes(float* dst, V v, int r) {
    if constexpr (KB == 16) {
      _mm512_storeu_ps(dst, v);
    } else if constexpr (KB == 8) {
      _mm256_storeu_ps(dst, r == 0 ? _mm512_castps512_ps256(v) : _mm512_extractf32x8_ps(v, 1));
    } else {
      switch (r) {
        case 0: _mm_storeu_ps(dst, _mm512_castps512_ps128(v)); break;
        case 1: _mm_storeu_ps(dst, _mm512_extractf32x4_ps(v, 1)); break;
        case 2: _mm_storeu_ps(dst, _mm512_extractf32x4_ps(v, 2)); break;
        default: _mm_storeu_ps(dst, _mm512_extractf32x4_ps(v, 3)); break;
      }
    }
  }
  // Cephes expf, as in attention_avx2.cpp; 0 below -87.3.
  static V exp(V x) {
    const __mmask16 small = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3f), _CMP_LT_OQ);
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.7f));
    const V n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    V r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    V y = _mm512_set1_ps(1.9875691500e-4f);
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
    y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mul_ps(__mmask16(~small), y, _mm512_castsi512_ps(e));
  }
  static V widen_f32(const uint8_t* p) { return _mm512_loadu_ps(p); }
  static V widen_f16(const uint8_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static V widen_bf16(const uint8_t* p) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
  static V widen_i8(const uint8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  // e4m3 code c -> f16 bits ((c & 0x80) << 8) | ((c & 0x7f) << 7) (kv_dtype.h), value / 256: the
  // sign-extended code shifted by 7 has the sign in bits 15 and 14, the magnitude in bits 7-13; clear 14.
  static V widen_e4m3(const uint8_t* p) {
    const __m256i c = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm512_cvtph_ps(_mm256_and_si256(_mm256_slli_epi16(c, 7), _mm256_set1_epi16(int16_t(0xbfff))));
  }
  static V widen_e5m2(const uint8_t* p) {
    const __m256i c = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm512_cvtph_ps(_mm256_slli_epi16(c, 8));
  }
};

// ---- shared by the VNNI and BF16 routines ----

// Lanes t of a 16-key vector with lo <= t < hi.
[[gnu::always_inline]] inline __mmask16 lanes_in(int lo, int hi) {
  const uint32_t below_hi = hi <= 0 ? 0u : hi >= 16 ? 0xffffu : (1u << hi) - 1;
  const uint32_t below_lo = lo <= 0 ? 0u : lo >= 16 ? 0xffffu : (1u << lo) - 1;
  return __mmask16(below_hi & ~below_lo);
}

// e^x for x <= 0, to a few 1e-6 relative (the routines round their weights to 15 or 8 bits): 2^(x log2 e)
// as a degree-5 polynomial of the fraction times 2^n by vscalefps, half the instructions of Avx512::exp;
// 0 below -87.3, -inf included.
[[gnu::always_inline]] inline __m512 exp_nonpositive(__m512 x) {
  const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3f), _CMP_GE_OQ);
  const __m512 t = _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f));
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(t, n);  // [-0.5, 0.5]
  __m512 y = _mm512_set1_ps(1.3333558e-3f);
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(9.6181291e-3f));
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(5.5504109e-2f));
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(2.4022651e-1f));
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(6.9314718e-1f));
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(keep, y, n);
}

// The 16-bit weights j and j + 1 of one query's row (int16 or bf16 words), in every 32-bit lane.
[[gnu::always_inline]] inline __m512i weight_pair(const void* row, int j) {
  int32_t pair;
  __builtin_memcpy(&pair, static_cast<const uint16_t*>(row) + j, 4);
  return _mm512_set1_epi32(pair);
}

// Applies softcap and the mask to query r's scaled scores s[0, n_pad) (TileKernel::mask_scores); their max.
inline __m512 mask_scores_max(const TileArgs& a, int r, int n_pad, float* s) {
  TileKernel<Avx512>::mask_scores(a, r, n_pad, s);
  __m512 mx = _mm512_set1_ps(kNegInf);
  for (int j = 0; j < n_pad; j += 16) mx = _mm512_max_ps(mx, _mm512_loadu_ps(s + j));
  return mx;
}

// Runs fn.template operator()<QB>(r0) over queries [0, R) in blocks of QB = 4, then 2, then 1 (with kThree,
// a last 3 as one block).
template <bool kThree = false, class Fn>
[[gnu::always_inline]] inline void for_query_blocks(int R, Fn&& fn) {
  int r0 = 0;
  for (; r0 + 4 <= R; r0 += 4) fn.template operator()<4>(r0);
  if constexpr (kThree)
    if (r0 + 3 == R) {
      fn.template operator()<3>(r0);
      return;
    }
  if (r0 + 2 <= R) {
    fn.template operator()<2>(r0);
    r0 += 2;
  }
  if (r0 < R) fn.template operator()<1>(r0);
}

// The keys any query of [r0, r0 + qb) sees, as whole key pairs: [*jlo, *jhi), both even (key *jhi - 1 may be
// a padding row); empty when no query of the block sees a key.
inline void pair_key_range(const TileArgs& a, int r0, int qb, int* jlo, int* jhi) {
  int lo = kKvTile, hi = 0;
  for (int r = r0; r < r0 + qb; ++r) {
    if (a.lo[r] >= a.hi[r]) continue;
    lo = a.lo[r] < lo ? a.lo[r] : lo;
    hi = a.hi[r] > hi ? a.hi[r] : hi;
  }
  if (lo >= hi) lo = hi = 0;
  *jlo = lo & ~1;
  *jhi = (hi + 1) & ~1;
}

// The output pass of the int8 and fp8 routines: the float tile's (merged into the running states with
// TileArgs::merge_into, else written as the tile state).
using TileMerge = TileKernel<Avx512>::Output;

}  // namespace
}  // namespace inflight::kernels::cpu

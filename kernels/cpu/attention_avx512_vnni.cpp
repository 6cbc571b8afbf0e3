// AVX-512 VNNI tile routine for int8 KV with one scale per row (Int8 with quant_group == head_dim) or
// per tensor (Int8Static): integer dot products instead of widening to f32. Other dtypes and shapes go
// to the AVX-512 float routine. Compiled with -mavx512vnni on top of the AVX-512 flags; reached only when
// active_isa() is Avx512Vnni.
//
//   scores: each query is rounded to int16 with its own scale (|q| max -> 32767), K rows widen to int16
//           and two keys' rows interleave by 32-bit lanes, vpdpwssd sums q.k exactly in int32 (|sum| <=
//           head_dim * 32767 * 127 < 2^31 for head_dim <= 256); score = float(sum) * scale * q_scale * k_scale.
//           The tile state merges into the driver's running state in the output pass (merge_into).
//   values: the softmax weights p_j * v_scale_j of a query are rounded to int16 against their tile max,
//           two keys' V rows interleave byte by byte and widen to int16 pairs, vpdpwssd accumulates
//           w_j v_j + w_j+1 v_j+1 exactly in int32 (< 64 * 32767 * 127 < 2^31); o = float(sum) * w_max / 32767.
//
// Integer sums are exact, so a result does not depend on blocking or on how many queries share the tile:
// the invariance of attention_tile.h holds. The roundings of q and of the weights (relative 2^-16 of
// their maxima) are far below int8's own error.
#include "kernels/cpu/attention_avx512_traits.h"

namespace inflight::kernels::cpu {
namespace {

constexpr int kQMax16 = 32767;

// Halving steps of a transposed sum (Avx512::transpose_sum) on int32 lanes. Always inlined: a call would
// spill the accumulators (measured: a third of the tile's time).
[[gnu::always_inline]] inline __m512i pair64(__m512i x, __m512i y) {
  return _mm512_add_epi32(_mm512_unpacklo_epi64(x, y), _mm512_unpackhi_epi64(x, y));
}
[[gnu::always_inline]] inline __m512i pair_lanes(__m512i x, __m512i y) {
  return _mm512_add_epi32(_mm512_shuffle_i32x4(x, y, 0x88), _mm512_shuffle_i32x4(x, y, 0xdd));
}

// 32 int8 of a row from feature i, widened to int16.
[[gnu::always_inline]] inline __m512i widen_i8x32(const void* row, int i) {
  return _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const int8_t*>(row) + i)));
}

}  // namespace

void quantize_queries_int16(const float* q, int num_queries, int D, int16_t* q16, float* q_scale) {
  const int pdim = padded_dim(D);
  for (int r = 0; r < num_queries; ++r) {
    const float* qr = q + int64_t(r) * pdim;
    __m512 mx = _mm512_setzero_ps();
    for (int i = 0; i < D; i += 16) mx = _mm512_max_ps(mx, _mm512_abs_ps(_mm512_loadu_ps(qr + i)));
    const float amax = _mm512_reduce_max_ps(mx);
    q_scale[r] = amax > 0.0f ? amax / float(kQMax16) : 1.0f;
    const __m512 inv = _mm512_set1_ps(amax > 0.0f ? float(kQMax16) / amax : 0.0f);
    for (int i = 0; i < D; i += 32) {
      const __m256i x0 = _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(qr + i), inv)));
      const __m256i x1 = _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(qr + i + 16), inv)));
      const __m512i x = _mm512_inserti64x4(_mm512_castsi256_si512(x0), x1, 1);  // 16 pairs of features
      int16_t* dst = q16 + int64_t(r) * 2 * D + 2 * i;
      _mm512_storeu_si512(dst, _mm512_unpacklo_epi32(x, x));
      _mm512_storeu_si512(dst + 32, _mm512_unpackhi_epi32(x, x));
    }
  }
}

namespace {

struct IntTile {
  using F = TileKernel<Avx512>;

  // Integer dots of queries [r0, r0 + QB) with keys [0, n_pad) into sc, NP key pairs per block. The K
  // rows of a pair interleave by 32-bit lanes (key 2p in even lanes, 2p + 1 in odd), against the queries'
  // pairs doubled the same way (quantize_queries_int16), so one accumulator sums two keys and the
  // transposed sum starts a level up: fewer shuffles than one accumulator per key.
  template <int QB, int NP>
  static void score_block(const TileArgs& a, const void* const* krows, const int16_t* q16, int r0, int n_pad,
                          float* sc, F::PrefetchCursor& pc) {
    constexpr int KB = 2 * NP, NA = QB * NP;  // keys per block, accumulators (8, 12 or 16)
    static_assert(NA == 8 || NA == 12 || NA == 16);
    const int D = a.head_dim;
    for (int j0 = 0; j0 < n_pad; j0 += KB) {
      __m512i acc[NA];
#pragma GCC unroll 16
      for (int x = 0; x < NA; ++x) acc[x] = _mm512_setzero_si512();
      for (int i = 0; i < D; i += 32) {
        if (r0 == 0) pc.issue();
        __m512i qlo[QB], qhi[QB];
#pragma GCC unroll 4
        for (int r = 0; r < QB; ++r) {
          qlo[r] = _mm512_loadu_si512(q16 + int64_t(r0 + r) * 2 * D + 2 * i);
          qhi[r] = _mm512_loadu_si512(q16 + int64_t(r0 + r) * 2 * D + 2 * i + 32);
        }
#pragma GCC unroll 16
        for (int p = 0; p < NP; ++p) {
          const __m512i ka = widen_i8x32(krows[j0 + 2 * p], i), kb = widen_i8x32(krows[j0 + 2 * p + 1], i);
          const __m512i lo = _mm512_unpacklo_epi32(ka, kb), hi = _mm512_unpackhi_epi32(ka, kb);
#pragma GCC unroll 4
          for (int r = 0; r < QB; ++r) {
            acc[r * NP + p] = _mm512_dpwssd_epi32(acc[r * NP + p], qlo[r], lo);
            acc[r * NP + p] = _mm512_dpwssd_epi32(acc[r * NP + p], qhi[r], hi);
          }
        }
      }
      // e[k]: accumulators 2k, 2k + 1 as 4 keys per 128-bit lane; out[o]: lanes 4g + u = key u of e[4o + g].
      __m512i e[NA / 2];
#pragma GCC unroll 8
      for (int k = 0; k < NA / 2; ++k) e[k] = pair64(acc[2 * k], acc[2 * k + 1]);
#pragma GCC unroll 2
      for (int o = 0; o < NA / 8; ++o) {
        const __m512 dots = _mm512_cvtepi32_ps(
            pair_lanes(pair_lanes(e[4 * o], e[4 * o + 1]), pair_lanes(e[4 * o + 2], e[4 * o + 3])));
        // Query r's keys fill NP / 2 consecutive e's: 16 / (2 NP) queries per output vector.
        if constexpr (NP == 4) {
          _mm256_storeu_ps(sc + int64_t(r0 + 2 * o) * kKvTile + j0, _mm512_castps512_ps256(dots));
          _mm256_storeu_ps(sc + int64_t(r0 + 2 * o + 1) * kKvTile + j0, _mm512_extractf32x8_ps(dots, 1));
        } else {
          _mm512_storeu_ps(sc + int64_t(r0 + o) * kKvTile + j0, dots);
        }
      }
      if constexpr (NA % 8 == 4) {  // 3 queries of 8 keys: the last one's two e's on their own
        const __m512i x = pair_lanes(e[NA / 2 - 2], e[NA / 2 - 1]);
        const __m512 dots = _mm512_cvtepi32_ps(pair_lanes(x, x));
        _mm256_storeu_ps(sc + int64_t(r0 + QB - 1) * kKvTile + j0, _mm512_castps512_ps256(dots));
      }
    }
  }

  // o[r] = sum_j w16[r][j] * V_j over features [c0, c0 + 64) (two 32-feature chunks), queries
  // [r0, r0 + QB), keys [jlo, jhi) (jlo even; key jhi may be a padding row).
  template <int QB>
  static void weigh_block(const TileArgs& a, const void* const* vrows, const int16_t* w16, const float* w_scale,
                          float global_v, int r0, int jlo, int jhi, int c0, const TileMerge& out,
                          F::PrefetchCursor& pc) {
    __m512i acc[QB][4];  // [query][chunk lo, chunk hi, chunk+1 lo, chunk+1 hi]
#pragma GCC unroll 4
    for (int r = 0; r < QB; ++r)
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_setzero_si512();
    const int nc = a.head_dim_v - c0 >= 64 ? 2 : 1;
    for (int j = jlo; j < jhi; j += 2) {
      if (r0 == 0) pc.issue();
      __m512i wp[QB];
#pragma GCC unroll 4
      for (int r = 0; r < QB; ++r) wp[r] = weight_pair(w16 + int64_t(r0 + r) * kKvTile, j);
      const auto* v0 = static_cast<const int8_t*>(vrows[j]);
      const auto* v1 = static_cast<const int8_t*>(vrows[j + 1]);
#pragma GCC unroll 2
      for (int c = 0; c < nc; ++c) {
        const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v0 + c0 + 32 * c));
        const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v1 + c0 + 32 * c));
        // lo: features 0-7 | 16-23 of the chunk, hi: 8-15 | 24-31, as (key j, key j+1) int16 pairs.
        const __m512i lo = _mm512_cvtepi8_epi16(_mm256_unpacklo_epi8(x, y));
        const __m512i hi = _mm512_cvtepi8_epi16(_mm256_unpackhi_epi8(x, y));
#pragma GCC unroll 4
        for (int r = 0; r < QB; ++r) {
          acc[r][2 * c] = _mm512_dpwssd_epi32(acc[r][2 * c], lo, wp[r]);
          acc[r][2 * c + 1] = _mm512_dpwssd_epi32(acc[r][2 * c + 1], hi, wp[r]);
        }
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < QB; ++r) {
      const __m512 s = _mm512_set1_ps(w_scale[r0 + r] * global_v);
      const bool merge = a.merge_into != nullptr;  // straight into the running state
      float* o = out.row(r0 + r) + c0;
      // NOTE: a constant trip count, so acc[][] is indexed by constants and stays in registers.
#pragma GCC unroll 2
      for (int c = 0; c < 2; ++c) {
        if (c == nc) break;
        const __m512i lo = acc[r][2 * c], hi = acc[r][2 * c + 1];
        const __m512 o0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_shuffle_i64x2(lo, hi, 0x44)), s);
        const __m512 o1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_shuffle_i64x2(lo, hi, 0xee)), s);
        // NOTE: merge tested here, not in TileMerge::put (int8 R = 1 4 % slower that way).
        if (merge) {
          F::merge_features(out.op[r0 + r], out.c[r0 + r], o + 32 * c, o0);
          F::merge_features(out.op[r0 + r], out.c[r0 + r], o + 32 * c + 16, o1);
        } else {
          _mm512_storeu_ps(o + 32 * c, o0);
          _mm512_storeu_ps(o + 32 * c + 16, o1);
        }
      }
    }
  }

  // The 3-query score block out of line: inlined into run() with the others, it slowed the 2-query block's
  // code (tile/int8/r2 8 % slower).
  [[gnu::noinline]] static void score_block3(const TileArgs& a, const void* const* krows, const int16_t* q16, int r0,
                                             int n_pad, float* sc, F::PrefetchCursor& pc) {
    score_block<3, 4>(a, krows, q16, r0, n_pad, sc, pc);
  }

  template <int QB>
  static void weigh_queries(const TileArgs& a, const void* const* vrows, const int16_t* w16, const float* w_scale,
                            float global_v, int r0, int pdim_v, const TileMerge& out, F::PrefetchCursor& pc) {
    int jlo, jhi;
    pair_key_range(a, r0, QB, &jlo, &jhi);
    if (r0 == 0) pc.pace(1, (jhi - jlo) / 2 * ((a.head_dim_v + 63) / 64));
    for (int c0 = 0; c0 < a.head_dim_v; c0 += 64)
      weigh_block<QB>(a, vrows, w16, w_scale, global_v, r0, jlo, jhi, c0, out, pc);
  }

  template <KvDType T>
  static void run(const TileArgs& a) {
    const int R = a.num_queries, n = a.num_keys, D = a.head_dim;
    const int n_pad = (n + 15) / 16 * 16;
    const int pdim_v = padded_dim(a.head_dim_v);
    const bool per_row = T == KvDType::Int8;
    float* sc = a.scratch;                                                  // [R, kKvTile] scores, weights
    float* rk = sc + int64_t(R) * kKvTile;                                  // [kKvTile] K row scales
    float* rv = rk + kKvTile;                                               // [kKvTile] V row scales
    float* q_scale_buf = rv + kKvTile;                                      // [R]
    float* w_scale = q_scale_buf + kMaxTileQueries;                         // [R]
    auto* q16_buf = reinterpret_cast<int16_t*>(w_scale + kMaxTileQueries); // [R, 2 D]
    int16_t* w16 = q16_buf + int64_t(R) * 2 * D;                            // [R, kKvTile]
    const float global_k = T == KvDType::Int8Static ? a.quant_orig_k : 1.0f;
    const float global_v = T == KvDType::Int8Static ? a.quant_orig_v : 1.0f;

    const void* krows[kKvTile];
    const void* vrows[kKvTile];
    F::pad_rows<T>(a, a.k_rows, a.k_scales, per_row, krows, rk);
    F::pad_rows<T>(a, a.v_rows, a.v_scales, per_row, vrows, rv);
    if (a.q16 == nullptr) quantize_queries_int16(a.q, R, D, q16_buf, q_scale_buf);
    const int16_t* q16 = a.q16 != nullptr ? a.q16 : q16_buf;  // rounded once by the driver, or here
    const float* q_scale = a.q16 != nullptr ? a.q16_scale : q_scale_buf;
    F::PrefetchCursor pc(a);
    pc.pace(2, n_pad / (R >= 3 ? 8 : 16) * (D / 32));  // the first query block's steps
    for_query_blocks<true>(R, [&]<int QB>(int r0) {
      if constexpr (QB == 3) score_block3(a, krows, q16, r0, n_pad, sc, pc);
      else score_block<QB, QB == 4 ? 4 : 8>(a, krows, q16, r0, n_pad, sc, pc);
    });

    const bool plain = a.softcap <= 0.0f && a.mask_kind == MaskKind::None;  // no softcap, no mask: one pass
    for (int r = 0; r < R; ++r) {
      float* s = sc + int64_t(r) * kKvTile;
      const __m512 f = _mm512_set1_ps(a.scale * global_k * q_scale[r]);
      const int lo = a.lo[r], hi = a.hi[r];
      __m512 mx = _mm512_set1_ps(kNegInf), vmax = _mm512_setzero_ps();  // score max; V row scale max in [lo, hi)
      const bool all = lo <= 0 && hi >= n_pad;  // every key visible (decode): no lane masks
      for (int j = 0; j < n_pad; j += 16) {
        __m512 x = _mm512_mul_ps(_mm512_loadu_ps(s + j), f);
        if (per_row) x = _mm512_mul_ps(x, _mm512_loadu_ps(rk + j));
        const __mmask16 in = all ? __mmask16(0xffff) : lanes_in(lo - j, hi - j);
        if (plain) x = _mm512_mask_blend_ps(in, _mm512_set1_ps(kNegInf), x);
        mx = _mm512_max_ps(mx, x);
        if (per_row) vmax = _mm512_mask_max_ps(vmax, in, vmax, _mm512_loadu_ps(rv + j));
        _mm512_storeu_ps(s + j, x);
      }
      if (!plain) mx = mask_scores_max(a, r, n_pad, s);
      const float m = _mm512_reduce_max_ps(mx);
      int16_t* w = w16 + int64_t(r) * kKvTile;
      if (!(m > kNegInf)) {
        a.m[r] = kNegInf;
        a.d[r] = 0.0f;
        w_scale[r] = 0.0f;
        for (int j = 0; j < kKvTile; ++j) w[j] = 0;
        continue;
      }
      // Weights p_j * v_scale_j <= the largest V row scale the query sees (p_j <= 1), so int16 against that
      // bound in the same pass as the exps.
      const float bound = per_row ? _mm512_reduce_max_ps(vmax) : 1.0f;
      w_scale[r] = bound / float(kQMax16);
      const __m512 inv = _mm512_set1_ps(bound > 0.0f ? float(kQMax16) / bound : 0.0f);
      __m512 sum = _mm512_setzero_ps();
      for (int j = 0; j < n_pad; j += 16) {
        const __m512 p = exp_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(s + j), _mm512_set1_ps(m)));
        sum = _mm512_add_ps(sum, p);
        const __m512 wj = _mm512_mul_ps(per_row ? _mm512_mul_ps(p, _mm512_loadu_ps(rv + j)) : p, inv);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(w + j), _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(wj)));
      }
      a.m[r] = m;
      a.d[r] = _mm512_reduce_add_ps(sum);
      for (int j = n_pad; j < kKvTile; ++j) w[j] = 0;
    }

    const TileMerge out(a, 1.0f);  // with merge_into, the weighting pass merges into the running states
    for_query_blocks<true>(R, [&]<int QB>(int r0) {
      weigh_queries<QB>(a, vrows, w16, w_scale, global_v, r0, pdim_v, out, pc);
    });
    pc.finish();
  }
};

}  // namespace

void attend_tile_avx512_vnni(const TileArgs& a) {
  if (!tile_uses_q16(true, a.dtype, a.quant_group, a.head_dim, a.head_dim_v)) {
    TileKernel<Avx512>::attend(a);
  } else if (a.dtype == KvDType::Int8) {
    IntTile::run<KvDType::Int8>(a);
  } else {
    IntTile::run<KvDType::Int8Static>(a);
  }
}

}  // namespace inflight::kernels::cpu

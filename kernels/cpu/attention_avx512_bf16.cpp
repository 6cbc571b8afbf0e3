// AVX-512 BF16 tile routine for fp8 KV (e4m3, e5m2: per-tensor scale): codes become bf16 words by table
// lookup (every fp8 value is exact in bf16), queries and softmax weights are rounded to bf16, and vdpbf16ps
// does 32 multiply-adds per instruction into f32 accumulators, as FlashAttention does on a GPU with bf16
// inputs (bf16 Q, P rounded to bf16 for P V). Other dtypes and head dims that are not a multiple of 32 go to
// the VNNI routine. Compiled with -mavx512bf16 -mavx512vbmi on top of the AVX-512 VNNI flags; reached only
// when active_isa() is Avx512Bf16. (bf16 KV through the same routine, its rows already bf16 words: tile
// 1.8x faster in L2, decode from DRAM 0-13 % slower, so bf16 stays on the float routine; bench/RESULTS.md.)
//
//   fp8:    the low 7 bits of a code index two 128-byte tables (vpermi2b: high and low byte of the bf16
//           value, fp8_to_bf16_bits), the sign bit is copied into the high byte, and unpacking the two byte
//           vectors gives bf16 words.
//   scores: two keys share an accumulator, key u of an 8-key group in the low 256 bits and key u + 4 in the
//           high ones, against the query's bf16 features laid out to match (queries_bf16), so the transposed
//           sum starts a level up and gives each query's keys in order.
//   values: the V rows of keys j and j + 1 interleave byte by byte, so each f32 lane adds w_j v_j +
//           w_j+1 v_j+1; the output pass puts the features back in order (vpermt2ps).
//
// A query's arithmetic is lane-wise and the same whatever the blocking, so a result does not depend on R
// or on the plan (the invariance of attention_tile.h). The bf16 roundings of q and of the weights (relative
// 2^-9) are far below fp8's own (2^-4 for e4m3, 2^-3 for e5m2).
#include "kernels/cpu/attention_avx512_traits.h"

namespace inflight::kernels::cpu {
namespace {

// The bf16 values of codes 0-127 (the sign bit is applied separately), as high and low bytes.
struct Fp8Tables {
  __m512i hi0, hi1, lo0, lo1;  // high bytes of codes 0-63, 64-127; low bytes of codes 0-63, 64-127
};

Fp8Tables load_tables(KvDType t) {
  const uint8_t* b = fp8_bf16_table(t == KvDType::Fp8E5M2);  // high bytes, then low bytes
  return {_mm512_load_si512(b), _mm512_load_si512(b + 64), _mm512_load_si512(b + 128), _mm512_load_si512(b + 192)};
}

// 64 codes -> 64 bf16 words: w0 gets bytes 0-7 of each 128-bit lane of z, w1 bytes 8-15, in order.
[[gnu::always_inline]] inline void to_bf16(const Fp8Tables& t, __m512i z, __m512i& w0, __m512i& w1) {
  const __m512i sign = _mm512_set1_epi8(char(0x80));
  const __m512i hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(t.hi0, z, t.hi1), z, sign, 0xf8);  // | z & 0x80
  const __m512i lo = _mm512_permutex2var_epi8(t.lo0, z, t.lo1);
  w0 = _mm512_unpacklo_epi8(lo, hi);
  w1 = _mm512_unpackhi_epi8(lo, hi);
}

[[gnu::always_inline]] inline __m256i load32(const void* row, int i) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint8_t*>(row) + i));
}

// How rows become bf16 words, 32 features at a time:
//   keys(krows, k, i, w0, w1):   features [i, i + 32) of keys k and k + 4 (k % 8 < 4), k's in the low 256
//                                bits of w0 and w1, k + 4's in the high ones, in the word order kQueryOrder
//                                gives the query;
//   values(vrows, j, i, w0, w1): features [i, i + 32) of V rows j and j + 1 (j even) as (j, j + 1) word
//                                pairs, whose f32 dot lanes kOutOrder puts back in feature order.
struct Fp8Rows {
  Fp8Tables t;
  // [0-7, 16-23] twice, then [8-15, 24-31] twice: to_bf16 of two keys' 32 codes, one key per 256 bits.
  alignas(64) static constexpr uint16_t kQueryOrder[64] = {
      0, 1, 2,  3,  4,  5,  6,  7,  16, 17, 18, 19, 20, 21, 22, 23,  //
      0, 1, 2,  3,  4,  5,  6,  7,  16, 17, 18, 19, 20, 21, 22, 23,  //
      8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31,  //
      8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31};
  // Lanes of w0's dots: [f0-3, f16-19, f8-11, f24-27], of w1's: [f4-7, f20-23, f12-15, f28-31].
  alignas(64) static constexpr int32_t kOutOrder[32] = {0, 1, 2, 3, 16, 17, 18, 19, 8,  9,  10, 11, 24, 25, 26, 27,
                                                        4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31};
  [[gnu::always_inline]] void keys(const void* const* krows, int k, int i, __m512i& w0, __m512i& w1) const {
    to_bf16(t, _mm512_inserti64x4(_mm512_castsi256_si512(load32(krows[k], i)), load32(krows[k + 4], i), 1), w0, w1);
  }
  [[gnu::always_inline]] void values(const void* const* vrows, int j, int i, __m512i& w0, __m512i& w1) const {
    const __m256i cx = load32(vrows[j], i), cy = load32(vrows[j + 1], i);
    // 128-bit lanes: (x, y) byte pairs of features 0-7, 16-23, 8-15, 24-31.
    const __m512i z =
        _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_unpacklo_epi8(cx, cy)), _mm256_unpackhi_epi8(cx, cy), 1);
    to_bf16(t, z, w0, w1);
  }
};

// The words of Fp8Rows::keys / values for a whole tile, converted once (tiles of many queries, which would
// otherwise convert every row once per query block): [key pair][32-feature chunk][64 words], K for the
// scores, then V for the weighting in the same buffer.
struct StagedRows {
  uint16_t* words;
  int chunks;  // head_dim / 32 of the rows staged
  [[gnu::always_inline]] void load(int pair, int i, __m512i& w0, __m512i& w1) const {
    const uint16_t* w = words + (int64_t(pair) * chunks + i / 32) * 64;
    w0 = _mm512_load_si512(w);
    w1 = _mm512_load_si512(w + 32);
  }
  // Key k's pair (k % 8 < 4): keys 0-3 and 4-7 are pairs 0-3, keys 8-11 and 12-15 pairs 4-7, ...
  [[gnu::always_inline]] void keys(const void* const*, int k, int i, __m512i& w0, __m512i& w1) const {
    load(k - 4 * (k / 8), i, w0, w1);
  }
  [[gnu::always_inline]] void values(const void* const*, int j, int i, __m512i& w0, __m512i& w1) const {
    load(j / 2, i, w0, w1);
  }
  static StagedRows stage_keys(const Fp8Rows& rows, const void* const* krows, int n_pad, int dim, uint16_t* words) {
    const StagedRows st{words, dim / 32};
    for (int k = 0; k < n_pad; k += (k % 8 == 3) ? 5 : 1)
      for (int i = 0; i < dim; i += 32) store(st, k - 4 * (k / 8), i, [&](__m512i& w0, __m512i& w1) {
        rows.keys(krows, k, i, w0, w1);
      });
    return st;
  }
  static StagedRows stage_values(const Fp8Rows& rows, const void* const* vrows, int n_pad, int dim, uint16_t* words) {
    const StagedRows st{words, dim / 32};
    for (int j = 0; j < n_pad; j += 2)
      for (int i = 0; i < dim; i += 32) store(st, j / 2, i, [&](__m512i& w0, __m512i& w1) {
        rows.values(vrows, j, i, w0, w1);
      });
    return st;
  }
  template <class Fn>
  [[gnu::always_inline]] static void store(const StagedRows& st, int pair, int i, Fn&& convert) {
    __m512i w0, w1;
    convert(w0, w1);
    uint16_t* w = st.words + (int64_t(pair) * st.chunks + i / 32) * 64;
    _mm512_store_si512(w, w0);
    _mm512_store_si512(w + 32, w1);
  }
};

// The routine; the score and weight blocks read their words through Src: Fp8Rows (converting as they go) or
// StagedRows (converted once per tile).
struct Fp8Tile {
  using F = TileKernel<Avx512>;

  // q [R, pdim] -> qb [R, 2 D] bf16 words: per 32-feature chunk, the 64 words of Fp8Rows::kQueryOrder.
  static void queries_bf16(const float* q, int R, int D, uint16_t* qb) {
    const int pdim = padded_dim(D);
    const __m512i ia = _mm512_load_si512(Fp8Rows::kQueryOrder), ib = _mm512_load_si512(Fp8Rows::kQueryOrder + 32);
    for (int r = 0; r < R; ++r)
      for (int i = 0; i < D; i += 32) {
        const float* x = q + int64_t(r) * pdim + i;
        const __m512i w = __m512i(_mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + 16), _mm512_loadu_ps(x)));
        uint16_t* dst = qb + int64_t(r) * 2 * D + 2 * i;
        _mm512_storeu_si512(dst, _mm512_permutexvar_epi16(ia, w));
        _mm512_storeu_si512(dst + 32, _mm512_permutexvar_epi16(ib, w));
      }
  }

  // Raw dots of queries [r0, r0 + QB) with keys [0, n_pad) into sc, NP key pairs (2 NP keys) per block:
  // pair p holds keys 8 (p / 4) + p % 4 and the one 4 on. Accumulator r * NP + p.
  template <int QB, int NP, class Src>
  static void score_block(const TileArgs& a, const Src& rows, const void* const* krows, const uint16_t* qb,
                          int r0, int n_pad, float* sc, F::PrefetchCursor& pc) {
    constexpr int NA = QB * NP;
    static_assert((NP == 4 || NP == 8) && (NA == 8 || NA == 12 || NA == 16));
    const int D = a.head_dim;
    for (int j0 = 0; j0 < n_pad; j0 += 2 * NP) {
      __m512 acc[NA];
#pragma GCC unroll 16
      for (int x = 0; x < NA; ++x) acc[x] = _mm512_setzero_ps();
      for (int i = 0; i < D; i += 32) {
        if (r0 == 0) pc.issue();
#pragma GCC unroll 8
        for (int p = 0; p < NP; ++p) {
          const int ka = j0 + 8 * (p / 4) + p % 4;
          __m512i w0, w1;
          rows.keys(krows, ka, i, w0, w1);
#pragma GCC unroll 4
          for (int r = 0; r < QB; ++r) {
            const uint16_t* q = qb + int64_t(r0 + r) * 2 * D + 2 * i;
            acc[r * NP + p] = _mm512_dpbf16_ps(acc[r * NP + p], __m512bh(_mm512_loadu_si512(q)), __m512bh(w0));
            acc[r * NP + p] = _mm512_dpbf16_ps(acc[r * NP + p], __m512bh(_mm512_loadu_si512(q + 32)), __m512bh(w1));
          }
        }
      }
      // e[g]: lane 4L + t = the 4 features of lane L of accumulator 4g + t, summed; out[h]: lanes 0-3 the key
      // sums of accumulators 8h..8h+3 (their low keys), 4-7 the same accumulators' high keys, 8-15 the next four.
      __m512 e[NA / 4];
#pragma GCC unroll 4
      for (int g = 0; g < NA / 4; ++g)
        e[g] = Avx512::pair_pd(Avx512::pair_ps(acc[4 * g], acc[4 * g + 1]),
                               Avx512::pair_ps(acc[4 * g + 2], acc[4 * g + 3]));
#pragma GCC unroll 2
      for (int h = 0; h < NA / 8; ++h) {
        const __m512 dots = Avx512::pair_lanes(e[2 * h], e[2 * h + 1]);
        if constexpr (NP == 4) {  // two queries of 8 keys
          _mm256_storeu_ps(sc + int64_t(r0 + 2 * h) * kKvTile + j0, _mm512_castps512_ps256(dots));
          _mm256_storeu_ps(sc + int64_t(r0 + 2 * h + 1) * kKvTile + j0, _mm512_extractf32x8_ps(dots, 1));
        } else {  // one query of 16 keys
          _mm512_storeu_ps(sc + int64_t(r0 + h) * kKvTile + j0, dots);
        }
      }
      if constexpr (NA % 8 == 4) {  // 3 queries of 8 keys: the last one's e on its own
        const __m512 dots = Avx512::pair_lanes(e[NA / 4 - 1], e[NA / 4 - 1]);
        _mm256_storeu_ps(sc + int64_t(r0 + QB - 1) * kKvTile + j0, _mm512_castps512_ps256(dots));
      }
    }
  }

  // o[r] = sum_j w[r][j] * V_j over features [c0, c0 + 64) (two 32-feature chunks), queries [r0, r0 + QB),
  // keys [jlo, jhi) (jlo even; key jhi may be a padding row).
  template <int QB, class Src>
  static void weigh_block(const TileArgs& a, const Src& rows, const void* const* vrows, const uint16_t* wb,
                          float global_v, int r0, int jlo, int jhi, int c0, const TileMerge& out,
                          F::PrefetchCursor& pc) {
    __m512 acc[QB][4];  // [query][chunk 0 words 0, 1; chunk 1 words 0, 1]
#pragma GCC unroll 4
    for (int r = 0; r < QB; ++r)
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_setzero_ps();
    const int nc = a.head_dim_v - c0 >= 64 ? 2 : 1;
    for (int j = jlo; j < jhi; j += 2) {
      if (r0 == 0) pc.issue();
      __m512bh wp[QB];
#pragma GCC unroll 4
      for (int r = 0; r < QB; ++r) wp[r] = __m512bh(weight_pair(wb + int64_t(r0 + r) * kKvTile, j));
#pragma GCC unroll 2
      for (int c = 0; c < nc; ++c) {
        __m512i w0, w1;
        rows.values(vrows, j, c0 + 32 * c, w0, w1);
#pragma GCC unroll 4
        for (int r = 0; r < QB; ++r) {
          acc[r][2 * c] = _mm512_dpbf16_ps(acc[r][2 * c], __m512bh(w0), wp[r]);
          acc[r][2 * c + 1] = _mm512_dpbf16_ps(acc[r][2 * c + 1], __m512bh(w1), wp[r]);
        }
      }
    }
    const __m512i lo_order = _mm512_load_si512(Fp8Rows::kOutOrder);
    const __m512i hi_order = _mm512_load_si512(Fp8Rows::kOutOrder + 16);
    const __m512 s = _mm512_set1_ps(global_v);
#pragma GCC unroll 4
    for (int r = 0; r < QB; ++r) {
      // NOTE: a constant trip count, so acc[][] is indexed by constants and stays in registers.
#pragma GCC unroll 2
      for (int c = 0; c < 2; ++c) {
        if (c == nc) break;
        const __m512 lo = acc[r][2 * c], hi = acc[r][2 * c + 1];
        out.put(r0 + r, c0 + 32 * c, _mm512_mul_ps(_mm512_permutex2var_ps(lo, lo_order, hi), s));
        out.put(r0 + r, c0 + 32 * c + 16, _mm512_mul_ps(_mm512_permutex2var_ps(lo, hi_order, hi), s));
      }
    }
  }

  template <int QB, class Src>
  static void weigh_queries(const TileArgs& a, const Src& rows, const void* const* vrows, const uint16_t* wb,
                            float global_v, int r0, int pdim_v, const TileMerge& out, F::PrefetchCursor& pc) {
    int jlo, jhi;
    pair_key_range(a, r0, QB, &jlo, &jhi);
    if (r0 == 0) pc.pace(1, (jhi - jlo) / 2 * ((a.head_dim_v + 63) / 64));
    for (int c0 = 0; c0 < a.head_dim_v; c0 += 64)
      weigh_block<QB, Src>(a, rows, vrows, wb, global_v, r0, jlo, jhi, c0, out, pc);
  }

  template <KvDType T>
  static void run(const TileArgs& a, const Fp8Rows& rows) {
    const int R = a.num_queries, n = a.num_keys, D = a.head_dim;
    const int n_pad = (n + 15) / 16 * 16;
    const int pdim_v = padded_dim(a.head_dim_v);
    float* sc = a.scratch;                                               // [R, kKvTile] scores
    auto* qb = reinterpret_cast<uint16_t*>(sc + int64_t(R) * kKvTile);  // [R, 2 D] bf16 queries
    uint16_t* wb = qb + int64_t(R) * 2 * D;                              // [R, kKvTile] bf16 weights
    uint16_t* staging = wb + int64_t(R) * kKvTile;                       // StagedRows (many queries)
    // Many queries: rows converted once into staging rather than once per query block (tile/fp8-e4m3/r16:
    // 215 -> 204 cycles per key; r8: 109 -> 119, so not at 2 blocks). Same words either way, same results.
    const bool staged = R > 8;

    const void* krows[kKvTile];
    const void* vrows[kKvTile];
    F::pad_rows<T>(a, a.k_rows, nullptr, false, krows, nullptr);
    F::pad_rows<T>(a, a.v_rows, nullptr, false, vrows, nullptr);
    queries_bf16(a.q, R, D, qb);
    F::PrefetchCursor pc(a);
    pc.pace(2, n_pad / (R >= 3 ? 8 : 16) * (D / 32));  // the first query block's steps
    auto score_all = [&](const auto& src) {
      for_query_blocks<true>(R, [&]<int QB>(int r0) {
        score_block<QB, QB >= 3 ? 4 : 8>(a, src, krows, qb, r0, n_pad, sc, pc);
      });
    };
    if (staged) score_all(StagedRows::stage_keys(rows, krows, n_pad, D, staging));
    else score_all(rows);

    const bool plain = a.softcap <= 0.0f && a.mask_kind == MaskKind::None;  // no softcap, no mask: one pass
    const __m512 f = _mm512_set1_ps(a.scale * a.quant_orig_k);
    for (int r = 0; r < R; ++r) {
      float* s = sc + int64_t(r) * kKvTile;
      const int lo = a.lo[r], hi = a.hi[r];
      const bool all = lo <= 0 && hi >= n_pad;  // every key visible (decode): no lane masks
      __m512 mx = _mm512_set1_ps(kNegInf);
      for (int j = 0; j < n_pad; j += 16) {
        __m512 x = _mm512_mul_ps(_mm512_loadu_ps(s + j), f);
        if (plain && !all) x = _mm512_mask_blend_ps(lanes_in(lo - j, hi - j), _mm512_set1_ps(kNegInf), x);
        mx = _mm512_max_ps(mx, x);
        _mm512_storeu_ps(s + j, x);
      }
      if (!plain) mx = mask_scores_max(a, r, n_pad, s);
      const float m = _mm512_reduce_max_ps(mx);
      uint16_t* w = wb + int64_t(r) * kKvTile;
      if (!(m > kNegInf)) {
        a.m[r] = kNegInf;
        a.d[r] = 0.0f;
        for (int j = 0; j < kKvTile; ++j) w[j] = 0;
        continue;
      }
      __m512 sum = _mm512_setzero_ps();
      for (int j = 0; j < n_pad; j += 16) {
        const __m512 p = exp_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(s + j), _mm512_set1_ps(m)));
        sum = _mm512_add_ps(sum, p);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(w + j), __m256i(_mm512_cvtneps_pbh(p)));
      }
      a.m[r] = m;
      a.d[r] = _mm512_reduce_add_ps(sum);
      for (int j = n_pad; j < kKvTile; ++j) w[j] = 0;
    }

    const TileMerge out(a, 1.0f);  // with merge_into, the weighting pass merges into the running states
    const float global_v = a.quant_orig_v;
    auto weigh_all = [&](const auto& src) {
      for_query_blocks<true>(R, [&]<int QB>(int r0) {
        weigh_queries<QB>(a, src, vrows, wb, global_v, r0, pdim_v, out, pc);
      });
    };
    if (staged) weigh_all(StagedRows::stage_values(rows, vrows, n_pad, a.head_dim_v, staging));
    else weigh_all(rows);
    pc.finish();
  }
};

}  // namespace

void attend_tile_avx512_bf16(const TileArgs& a) {
  if (a.head_dim % 32 != 0 || a.head_dim_v % 32 != 0) return attend_tile_avx512_vnni(a);
  switch (a.dtype) {
    case KvDType::Fp8E4M3: return Fp8Tile::run<KvDType::Fp8E4M3>(a, Fp8Rows{load_tables(a.dtype)});
    case KvDType::Fp8E5M2: return Fp8Tile::run<KvDType::Fp8E5M2>(a, Fp8Rows{load_tables(a.dtype)});
    default: return attend_tile_avx512_vnni(a);
  }
}

}  // namespace inflight::kernels::cpu

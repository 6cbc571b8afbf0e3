// The tile routine of attention_tile.h, written once over a SIMD traits class S and compiled in each
// ISA file (scalar, AVX2, AVX-512) with that file's flags.
//
// One call: score the tile's keys against every query in blocks of QB queries x W/QB keys (one f32
// accumulator per (query, key) over the features, then one fixed-order transposed sum), scale, softcap,
// mask, softmax against the tile max, then accumulate each query's weighted V in blocks of QB queries x
// CB feature vectors over the keys any query of the block sees. Rows are widened to f32 in registers as
// they are read when the queries are few (R <= kMaxQB: each row is widened once either way), else once
// into an L1 staging buffer; padding keys read a zero row. Per-tensor and per-row (Int8 with
// quant_group == head_dim) scales are not applied to the values: they multiply the scores (K) and the
// weights / tile output (V), one multiply per key.
//
// Determinism: a key's score, a query's max, sum and weighted sum depend only on the query, the key
// rows and the key's position in its tile (absolute position mod kKvTile), never on the other queries,
// on how many keys the tile holds past the query's last visible one, or on R (the transposed sum is the
// same tree for every lane; a key outside a query's range adds an exact +0 to its V accumulators).
//
// S provides: W, kMaxQB, kAccBudget, V, zero, set1, load, store, add, mul, fmadd, max, hsum, hmax,
// transpose_sum (W accumulators -> lane t = sum of acc[t]), store_lanes, exp (0 below -87.3, -inf
// included), and widen_<dtype> (W stored elements -> W floats; e4m3 gives value / 256).
//
// NOTE: deliberately in an anonymous namespace (see attention_tile.h).
#pragma once
#include <cstdint>

#include "kernels/cpu/attention_tile.h"

namespace inflight::kernels::cpu {
namespace {

constexpr float kNegInf = -__builtin_inff();

// prefetcht1: the line of p into L2. NOTE: inline asm, because GCC 12's modref analysis lets DCE delete
// __builtin_prefetch / _mm_prefetch calls in helpers like PrefetchCursor below.
// (prefetcht1 measured best: t0 and nta were 30% slower, t2 as fast for f16 but slower for int8.)
inline void prefetch_l2(const char* p) { asm volatile("prefetcht1 %0" : : "m"(*p)); }
inline void prefetch_l1(const char* p) { asm volatile("prefetcht0 %0" : : "m"(*p)); }

// The row read for keys past the end of a tile (padding to whole key blocks): zeros, wide enough for
// any row of up to 1024 f32 features.
alignas(64) constexpr uint8_t kZeroRow[4096] = {};

// How one dtype is widened: element bytes and the traits' loader.
template <class S, KvDType T>
struct Widen;
template <class S>
struct Widen<S, KvDType::F32> {
  static constexpr int kBytes = 4;
  static typename S::V load(const uint8_t* p) { return S::widen_f32(p); }
};
template <class S>
struct Widen<S, KvDType::F16> {
  static constexpr int kBytes = 2;
  static typename S::V load(const uint8_t* p) { return S::widen_f16(p); }
};
template <class S>
struct Widen<S, KvDType::BF16> {
  static constexpr int kBytes = 2;
  static typename S::V load(const uint8_t* p) { return S::widen_bf16(p); }
};
template <class S>
struct Widen<S, KvDType::Int8> {
  static constexpr int kBytes = 1;
  static typename S::V load(const uint8_t* p) { return S::widen_i8(p); }
};
template <class S>
struct Widen<S, KvDType::Int8Static> : Widen<S, KvDType::Int8> {};
template <class S>
struct Widen<S, KvDType::Fp8E4M3> {
  static constexpr int kBytes = 1;
  static typename S::V load(const uint8_t* p) { return S::widen_e4m3(p); }
};
template <class S>
struct Widen<S, KvDType::Fp8E5M2> {
  static constexpr int kBytes = 1;
  static typename S::V load(const uint8_t* p) { return S::widen_e5m2(p); }
};

template <class S>
struct TileKernel {
  using V = typename S::V;
  static constexpr int W = S::W;

  // Writes one stored row as `pdim` floats at dst: dim widened values (times the group scales when
  // `group` is set), then zeros.
  template <KvDType T>
  static void stage_row(const void* src, int dim, int pdim, const float* group, int quant_group, float* dst) {
    using Wd = Widen<S, T>;
    const auto* p = static_cast<const uint8_t*>(src);
    int i = 0;
    for (; i < dim; i += W) {
      V x;
      if (i + W <= dim) {
        x = Wd::load(p + i * Wd::kBytes);
      } else {  // tail: through a zeroed buffer, reading only the row's bytes
        alignas(64) uint8_t tmp[W * 4];
        for (int b = 0; b < W * 4; ++b) tmp[b] = 0;
        for (int b = 0; b < (dim - i) * Wd::kBytes; ++b) tmp[b] = p[i * Wd::kBytes + b];
        x = Wd::load(tmp);
      }
      if (group != nullptr) {
        if (quant_group % W == 0) {
          x = S::mul(x, S::set1(group[i / quant_group]));
        } else {
          alignas(64) float s[W];
          for (int l = 0; l < W; ++l) s[l] = i + l < dim ? group[(i + l) / quant_group] : 0.0f;
          x = S::mul(x, S::load(s));
        }
      }
      S::store(dst + i, x);
    }
    for (; i < pdim; i += W) S::store(dst + i, S::zero());
  }

  // Stages rows [0, n) of `rows` (pad_rows' output, offsets applied) into dst ([round_up(n, W), pdim]); row
  // scales (Int8 with one group per row) go to row_scale, padded keys get zero rows.
  template <KvDType T>
  static void stage_rows(const TileArgs& a, const void* const* rows, const float* const* scales, int dim,
                         float* dst, float* row_scale) {
    const int pdim = padded_dim(dim);
    const int n = a.num_keys;
    const bool per_row = T == KvDType::Int8 && a.quant_group == dim;
    for (int j = 0; j < n; ++j) {
      const float* group = T == KvDType::Int8 && !per_row ? scales[j] + a.scale_offset : nullptr;
      stage_row<T>(rows[j], dim, pdim, group, a.quant_group, dst + int64_t(j) * pdim);
      if (per_row) row_scale[j] = scales[j][a.scale_offset];
    }
    const int padded = (n + W - 1) / W * W;
    for (int j = n; j < padded; ++j) {
      for (int i = 0; i < pdim; i += W) S::store(dst + int64_t(j) * pdim + i, S::zero());
      if (per_row) row_scale[j] = 0.0f;
    }
  }

  // Applies softcap, the additive / boolean mask and [lo, hi) to one query's scores s[0, n_pad).
  static void mask_scores(const TileArgs& a, int r, int n_pad, float* s) {
    const int lo = a.lo[r], hi = a.hi[r];
    if (a.softcap > 0.0f) {
      const float c = a.softcap, inv = 1.0f / a.softcap;
      for (int j = lo; j < hi; ++j) s[j] = c * __builtin_tanhf(s[j] * inv);
    }
    for (int j = 0; j < lo; ++j) s[j] = kNegInf;
    for (int j = hi; j < n_pad; ++j) s[j] = kNegInf;
    if (a.mask_kind == MaskKind::None || a.mask_rows[r] == nullptr) return;
    if (a.mask_kind == MaskKind::Bool) {
      const auto* m = static_cast<const uint8_t*>(a.mask_rows[r]);
      for (int j = lo; j < hi; ++j) s[j] = m[j] != 0 ? kNegInf : s[j];
    } else {
      const auto* m = static_cast<const float*>(a.mask_rows[r]);
      for (int j = lo; j < hi; ++j) s[j] += m[j];
    }
  }

  // Where a tile's K or V rows are read from: widened on the fly from the cache rows (few queries:
  // each row is widened once either way) or from the f32 staging buffer (many queries). Both give the
  // same floats, so the choice never changes a result.
  template <KvDType T, bool kStaged>
  struct RowSource {
    const void* const* rows;  // [n_pad] cache rows (on the fly)
    const float* staged;      // [n_pad, pdim] (staged)
    int pdim;
    V load(int j, int i) const {
      if constexpr (kStaged) return S::load(staged + int64_t(j) * pdim + i);
      else return Widen<S, T>::load(static_cast<const uint8_t*>(rows[j]) + int64_t(i) * Widen<S, T>::kBytes);
    }
  };

  // Brings the tile's prefetch bytes towards L2 a few lines at a time, spread evenly over the tile's
  // work: the scoring pass issues the first half at every feature step of the first query block, the
  // weighting pass the rest at every key. Bursts stall: a prefetch that misses holds one of the core's
  // few miss buffers for a DRAM latency, and loads wait behind a full set (measured on a paced read:
  // 32 prefetches at a time instead of one per line cost 10-25 % of the bandwidth, and all of them in
  // the first half of the work up to 40 %).
  struct PrefetchCursor {
    const char* const* regions = nullptr;
    int64_t bytes = 0;           // of each region
    int64_t end = 0;             // end offset, regions laid end to end
    int region = 0, last = 0;    // the region p is in, the last one with bytes to fetch
    const char* p = nullptr;     // next line
    const char* stop = nullptr;  // end of the bytes to fetch in p's region
    int step = 0;                // lines per issue()

    explicit PrefetchCursor(const TileArgs& a) {
      if (a.num_prefetch == 0 || a.prefetch_end <= a.prefetch_begin) return;
      regions = a.prefetch;
      bytes = a.prefetch_bytes;
      end = a.prefetch_end;
      const int64_t off = a.prefetch_begin & ~int64_t(63);
      region = int(off / bytes);  // the tile's only divisions
      last = int((end - 1) / bytes);
      p = regions[region] + (off - region * bytes);
      stop = regions[region] + (region == last ? end - region * bytes : bytes);
    }
    // Spreads `share` of the lines left (1: all, 2: half) over `points` issue() calls.
    void pace(int share, int points) {
      if (p == nullptr) return;
      const int64_t lines = (end - region * bytes - (p - regions[region]) + 63) / 64;
      step = points > 0 ? int((lines / share + points - 1) / points) : 0;
    }
    // Up to `step` lines, not past the region's end; the next call goes on in the next region. No check
    // per line: the tile's inner loops call it.
    [[gnu::always_inline]] void issue() {
      const int64_t n = std::min<int64_t>(int64_t(step) * 64, stop - p);
      for (int64_t b = 0; b < n; b += 64) prefetch_l2(p + b);
      p += n;
      if (p == stop && region < last) {
        ++region;
        p = regions[region];
        stop = p + (region == last ? end - region * bytes : bytes);
      }
    }
    void finish() {
      step = 1 << 24;
      while (p != stop) issue();
    }
  };

  // Pulls rows [j0, j0 + count) of `rows` (tile keys; past num_keys ignored) towards L1. Scoring calls it for
  // the V rows of each key group: the weighting pass reads them next (measured at 8k: f16 and bf16 decode
  // 7-11 % faster; pulling K rows ahead the same way did not help, and for 1-byte rows, fp8 and int8, it
  // costs more than it saves, so they skip it).
  [[gnu::always_inline]] static void prefetch_rows_l1(const TileArgs& a, const void* const* rows, int dim, int j0,
                                                      int count) {
    if (kv_elem_bytes(a.dtype) < 2) return;
    const int bytes = dim * kv_elem_bytes(a.dtype);
    for (int j = j0; j < j0 + count && j < a.num_keys; ++j) {
      const char* row = static_cast<const char*>(rows[j]) + a.row_offset;
      for (int b = 0; b < bytes; b += 64) prefetch_l1(row + b);
    }
  }

  // Raw dots of queries [r0, r0 + QB) with keys [0, n_pad) into sc ([R, kKvTile]): QB x KB accumulators,
  // each one (query, key) chain over the features, then one transposed sum (lane r * KB + t).
  template <int QB, class Src>
  static void score_block(const TileArgs& a, const Src& k, int r0, int n_pad, int pdim, float* sc, PrefetchCursor& pc) {
    constexpr int KB = W / QB;
    for (int j0 = 0; j0 < n_pad; j0 += KB) {
      if (r0 == 0) prefetch_rows_l1(a, a.v_rows, a.head_dim_v, j0, KB);
      V acc[QB * KB];
#pragma GCC unroll 16
      for (int x = 0; x < QB * KB; ++x) acc[x] = S::zero();
      for (int i = 0; i < pdim; i += W) {
        if (r0 == 0) pc.issue();
        V qv[QB];
#pragma GCC unroll 4
        for (int r = 0; r < QB; ++r) qv[r] = S::load(a.q + int64_t(r0 + r) * pdim + i);
#pragma GCC unroll 16
        for (int t = 0; t < KB; ++t) {
          const V kv = k.load(j0 + t, i);
#pragma GCC unroll 4
          for (int r = 0; r < QB; ++r) acc[r * KB + t] = S::fmadd(qv[r], kv, acc[r * KB + t]);
        }
      }
      const V dots = S::transpose_sum(acc);
#pragma GCC unroll 4
      for (int r = 0; r < QB; ++r) S::template store_lanes<KB>(sc + int64_t(r0 + r) * kKvTile + j0, dots, r);
    }
  }

  template <class Src>
  static void score_all(const TileArgs& a, const Src& k, int n_pad, int pdim, float* sc, PrefetchCursor& pc) {
    // The first query block's key groups times feature steps issue the first half of the prefetches.
    const int first_qb = a.num_queries >= S::kMaxQB ? S::kMaxQB : (S::kMaxQB > 2 && a.num_queries >= 2) ? 2 : 1;
    pc.pace(2, n_pad / (W / first_qb) * (pdim / W));
    int r0 = 0;
    for (; r0 + S::kMaxQB <= a.num_queries; r0 += S::kMaxQB) score_block<S::kMaxQB>(a, k, r0, n_pad, pdim, sc, pc);
    if constexpr (S::kMaxQB > 2)
      if (r0 + 2 <= a.num_queries) {
        score_block<2>(a, k, r0, n_pad, pdim, sc, pc);
        r0 += 2;
      }
    for (; r0 < a.num_queries; ++r0) score_block<1>(a, k, r0, n_pad, pdim, sc, pc);
  }

  // The scalar half of merge_state: a <- a (+) (m, d) for m, d, and how a.o must then change, with
  // factor c: kSkip (b empty), kCopy (a empty: a.o = b.o), kAddScaledB (a.o += b.o c) or kScaleA
  // (a.o = b.o + a.o c). The side holding the max has factor exp(0) = 1 exactly, so one exp and one product
  // per feature fewer give the same bits.
  enum MergeOp { kSkip, kCopy, kAddScaledB, kScaleA };
  static MergeOp merge_scalars(SoftmaxState& a, float m, float d, float* c) {
    if (!(m > kNegInf)) return kSkip;
    if (!(a.m > kNegInf)) {
      a.m = m;
      a.d = d;
      return kCopy;
    }
    if (a.m >= m) {
      *c = __builtin_expf(m - a.m);
      a.d = a.d + d * *c;
      return kAddScaledB;
    }
    *c = __builtin_expf(a.m - m);
    a.d = a.d * *c + d;
    a.m = m;
    return kScaleA;
  }
  // W features of a.o from those of b.o (bo) by merge_scalars' op.
  static void merge_features(MergeOp op, float c, float* ao, V bo) {
    switch (op) {
      case kSkip: return;
      case kCopy: S::store(ao, bo); return;
      case kAddScaledB: S::store(ao, S::fmadd(bo, S::set1(c), S::load(ao))); return;
      case kScaleA: S::store(ao, S::add(bo, S::mul(S::load(ao), S::set1(c)))); return;
    }
  }

  // Where the weighting's sums go, once the tile's m and d are known: times the per-tensor V factor gv, into the
  // tile state's o, or, with TileArgs::merge_into, merged straight into each query's running state (the same
  // operations as writing o and merging it afterwards, without the round trip through o). Every tile routine's
  // output pass uses it (the int8 and fp8 ones scale their sums themselves: gv 1).
  struct Output {
    const TileArgs& a;
    int pdim_v;
    bool scaled;
    V global_v;
    MergeOp op[kMaxTileQueries];
    float c[kMaxTileQueries];
    Output(const TileArgs& args, float gv)
        : a(args), pdim_v(padded_dim(args.head_dim_v)), scaled(gv != 1.0f), global_v(S::set1(gv)) {
      if (a.merge_into != nullptr)
        for (int r = 0; r < a.num_queries; ++r) op[r] = merge_scalars(a.merge_into[r], a.m[r], a.d[r], &c[r]);
    }
    // Where query r's output goes: its running state's features (merging) or its tile state's.
    float* row(int r) const { return a.merge_into != nullptr ? a.merge_into[r].o : a.o + int64_t(r) * pdim_v; }
    // W features [i, i + W) of query r's weighted sum.
    [[gnu::always_inline]] void put(int r, int i, V x) const {
      if (scaled) x = S::mul(x, global_v);
      if (a.merge_into != nullptr) merge_features(op[r], c[r], row(r) + i, x);
      else S::store(row(r) + i, x);
    }
  };

  // o[r] (+)= sum_{j in [jlo, jhi)} w[r][j] * V_j over chunks [c0, c0 + CB) for queries [r0, r0 + QB).
  template <int QB, int CB, class Src>
  static void weigh_block(const float* w, int r0, int jlo, int jhi, const Src& v, int c0, const Output& out,
                          PrefetchCursor& pc) {
    V acc[QB][CB];
#pragma GCC unroll 4
    for (int r = 0; r < QB; ++r)
#pragma GCC unroll 8
      for (int c = 0; c < CB; ++c) acc[r][c] = S::zero();
    for (int j = jlo; j < jhi; ++j) {
      if (r0 == 0) pc.issue();
      V wr[QB];
#pragma GCC unroll 4
      for (int r = 0; r < QB; ++r) wr[r] = S::set1(w[int64_t(r0 + r) * kKvTile + j]);
#pragma GCC unroll 8
      for (int c = 0; c < CB; ++c) {
        const V x = v.load(j, (c0 + c) * W);
#pragma GCC unroll 4
        for (int r = 0; r < QB; ++r) acc[r][c] = S::fmadd(wr[r], x, acc[r][c]);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < QB; ++r)
#pragma GCC unroll 8
      for (int c = 0; c < CB; ++c) out.put(r0 + r, (c0 + c) * W, acc[r][c]);
  }

  template <int QB, class Src>
  static void weigh_queries(const TileArgs& a, const float* w, int r0, const Src& v, int pdim_v, const Output& out,
                            PrefetchCursor& pc) {
    constexpr int kMaxCB = S::kAccBudget / QB;
    int jlo = kKvTile, jhi = 0;
    for (int r = r0; r < r0 + QB; ++r) {
      if (a.lo[r] >= a.hi[r]) continue;
      jlo = a.lo[r] < jlo ? a.lo[r] : jlo;
      jhi = a.hi[r] > jhi ? a.hi[r] : jhi;
    }
    if (jlo >= jhi) jlo = jhi = 0;  // zeros (every query of the block is empty)
    const int nc = pdim_v / W;
    if (r0 == 0) pc.pace(1, (jhi - jlo) * ((nc + kMaxCB - 1) / kMaxCB));
    int c0 = 0;
    for (; c0 + kMaxCB <= nc; c0 += kMaxCB) weigh_block<QB, kMaxCB>(w, r0, jlo, jhi, v, c0, out, pc);
    if constexpr (kMaxCB > 4)
      if (c0 + 4 <= nc) {
        weigh_block<QB, 4>(w, r0, jlo, jhi, v, c0, out, pc);
        c0 += 4;
      }
    if constexpr (kMaxCB > 2)
      if (c0 + 2 <= nc) {
        weigh_block<QB, 2>(w, r0, jlo, jhi, v, c0, out, pc);
        c0 += 2;
      }
    for (; c0 < nc; ++c0) weigh_block<QB, 1>(w, r0, jlo, jhi, v, c0, out, pc);
  }

  template <class Src>
  static void weigh_all(const TileArgs& a, const float* w, const Src& v, int pdim_v, const Output& out,
                        PrefetchCursor& pc) {
    int r0 = 0;
    for (; r0 + S::kMaxQB <= a.num_queries; r0 += S::kMaxQB) weigh_queries<S::kMaxQB>(a, w, r0, v, pdim_v, out, pc);
    if constexpr (S::kMaxQB > 2)
      if (r0 + 2 <= a.num_queries) {
        weigh_queries<2>(a, w, r0, v, pdim_v, out, pc);
        r0 += 2;
      }
    for (; r0 < a.num_queries; ++r0) weigh_queries<1>(a, w, r0, v, pdim_v, out, pc);
    pc.finish();
  }

  // Row pointers of the tile padded to n_pad with a zero row, and the Int8 per-row scales.
  // Not inlined: inside the tile routine its loops ran with their pointers spilled (measured 2-3 % of the
  // int8 tile).
  template <KvDType T>
  [[gnu::noinline]] static void pad_rows(const TileArgs& a, const void* const* rows, const float* const* scales,
                                         bool per_row, const void** out, float* row_scale) {
    const int n = a.num_keys, n_pad = (n + W - 1) / W * W;
    for (int j = 0; j < n; ++j) out[j] = static_cast<const uint8_t*>(rows[j]) + a.row_offset;
    for (int j = n; j < n_pad; ++j) out[j] = kZeroRow;
    if (per_row) {
      int j = 0;
      if constexpr (requires { S::copy_if_contiguous8(scales, int64_t(0), row_scale); })
        for (; j + 8 <= n; j += 8)
          if (!S::copy_if_contiguous8(scales + j, a.scale_offset, row_scale + j))
            for (int t = j; t < j + 8; ++t) row_scale[t] = scales[t][a.scale_offset];
      for (; j < n; ++j) row_scale[j] = scales[j][a.scale_offset];
      for (; j < n_pad; ++j) row_scale[j] = 0.0f;
    }
  }

  template <KvDType T>
  static void run(const TileArgs& a) {
    const int R = a.num_queries, n = a.num_keys;
    const int pdim = padded_dim(a.head_dim), pdim_v = padded_dim(a.head_dim_v);
    const int n_pad = (n + W - 1) / W * W;
    float* kst = a.scratch;                                   // [kKvTile, pdim]
    float* vst = kst + int64_t(kKvTile) * pdim;               // [kKvTile, pdim_v]
    float* rk = vst + int64_t(kKvTile) * pdim_v;              // [kKvTile] K row scales
    float* rv = rk + kKvTile;                                 // [kKvTile] V row scales
    float* sc = rv + kKvTile;                                 // [R, kKvTile] scores, then weights
    const bool per_row = T == KvDType::Int8 && a.quant_group == a.head_dim;
    float global_k = 1.0f, global_v = 1.0f;  // per-tensor factors of the widened K and V values
    if constexpr (T == KvDType::Int8Static || T == KvDType::Fp8E5M2) global_k = a.quant_orig_k, global_v = a.quant_orig_v;
    if constexpr (T == KvDType::Fp8E4M3) {
      global_k = a.quant_orig_k * kFp8E4M3ViaF16Scale;
      global_v = a.quant_orig_v * kFp8E4M3ViaF16Scale;
    }
    // Widen on the fly unless many queries would widen each row many times, or a row does not fill
    // whole vectors, or Int8 group scales vary inside a row. "Many": more than 4 query blocks for 2-byte
    // rows (one instruction widens W values), more than 2 for 1-byte codes (3-4 instructions). Measured
    // against staging past one block (bench_attention tile/ cases): f16 R = 8 -22 %, R = 16 -11 %, e4m3
    // R = 8 -4 %, but e4m3 R = 16 +8 % on the fly.
    const bool grouped = T == KvDType::Int8 && !per_row;
    constexpr int kOnTheFlyBlocks = Widen<S, T>::kBytes >= 2 ? 4 : 2;
    const bool many = T != KvDType::F32 && R > kOnTheFlyBlocks * S::kMaxQB;
    const bool stage_k = many || grouped || a.head_dim % W != 0;
    const bool stage_v = many || grouped || a.head_dim_v % W != 0;

    const void* krows[kKvTile];
    const void* vrows[kKvTile];
    PrefetchCursor pc(a);
    pad_rows<T>(a, a.k_rows, a.k_scales, per_row, krows, rk);
    if (stage_k) {
      stage_rows<T>(a, krows, a.k_scales, a.head_dim, kst, rk);
      score_all(a, RowSource<T, true>{krows, kst, pdim}, n_pad, pdim, sc, pc);
    } else {
      score_all(a, RowSource<T, false>{krows, kst, pdim}, n_pad, pdim, sc, pc);
    }
    const V score_scale = S::set1(a.scale * global_k);
    for (int r = 0; r < R; ++r) {
      float* s = sc + int64_t(r) * kKvTile;
      for (int j = 0; j < n_pad; j += W) {
        V x = S::mul(S::load(s + j), score_scale);
        if (per_row) x = S::mul(x, S::load(rk + j));
        S::store(s + j, x);
      }
      mask_scores(a, r, n_pad, s);
    }

    pad_rows<T>(a, a.v_rows, a.v_scales, per_row, vrows, rv);
    for (int r = 0; r < R; ++r) {
      float* s = sc + int64_t(r) * kKvTile;
      V mx = S::set1(kNegInf);
      for (int j = 0; j < n_pad; j += W) mx = S::max(mx, S::load(s + j));
      const float m = S::hmax(mx);
      if (!(m > kNegInf)) {  // no visible key: weights 0, state empty
        a.m[r] = kNegInf;
        a.d[r] = 0.0f;
        for (int j = 0; j < n_pad; j += W) S::store(s + j, S::zero());
        continue;
      }
      V sum = S::zero();
      for (int j = 0; j < n_pad; j += W) {
        const V p = S::exp(S::add(S::load(s + j), S::set1(-m)));
        sum = S::add(sum, p);
        S::store(s + j, per_row ? S::mul(p, S::load(rv + j)) : p);
      }
      a.m[r] = m;
      a.d[r] = S::hsum(sum);
    }
    Output out(a, global_v);
    if (stage_v) {
      stage_rows<T>(a, vrows, a.v_scales, a.head_dim_v, vst, rv);
      weigh_all(a, sc, RowSource<T, true>{vrows, vst, pdim_v}, pdim_v, out, pc);
    } else {
      weigh_all(a, sc, RowSource<T, false>{vrows, vst, pdim_v}, pdim_v, out, pc);
    }
  }

  // a <- a (+) b (merge_state of attention_tile.h) over dim floats, W at a time. The exps are libm's
  // expf in every ISA, so only the multiply-adds differ (fused where the ISA has FMA).
  static void merge(SoftmaxState& a, const SoftmaxState& b, int dim) {
    float c = 0.0f;
    const MergeOp op = merge_scalars(a, b.m, b.d, &c);
    int i = 0;
    for (; i + W <= dim; i += W) merge_features(op, c, a.o + i, S::load(b.o + i));
    for (; i < dim; ++i) {
      if (op == kCopy) a.o[i] = b.o[i];
      else if (op == kAddScaledB) a.o[i] = a.o[i] + b.o[i] * c;
      else if (op == kScaleA) a.o[i] = a.o[i] * c + b.o[i];
    }
  }

  static void attend(const TileArgs& a) {
    switch (a.dtype) {
      case KvDType::F32: run<KvDType::F32>(a); break;
      case KvDType::F16: run<KvDType::F16>(a); break;
      case KvDType::BF16: run<KvDType::BF16>(a); break;
      case KvDType::Int8: run<KvDType::Int8>(a); break;
      case KvDType::Int8Static: run<KvDType::Int8Static>(a); break;
      case KvDType::Fp8E4M3: run<KvDType::Fp8E4M3>(a); break;
      case KvDType::Fp8E5M2: run<KvDType::Fp8E5M2>(a); break;
    }
  }
};

}  // namespace
}  // namespace inflight::kernels::cpu

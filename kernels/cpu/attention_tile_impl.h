// The tile routine of attention_tile.h, written once over a SIMD traits class S and compiled in each
// ISA file (scalar, AVX2, AVX-512) with that file's flags.
//
// One call: stage the tile's K rows as f32 (dequantized in registers, zero padded to W-key groups),
// score them against every query (W keys at a time, one fixed-order transposed sum), mask, softmax
// against the tile max, stage V, and accumulate each query's weighted V over its visible keys.
// Per-tensor and per-row (Int8 with quant_group == head_dim) scales are not applied while staging:
// they multiply the scores (K) and the weights / tile output (V) instead, one multiply per key.
//
// Determinism: a key's score, a query's max, sum and weighted sum depend only on the query, the key
// rows and the key's position in its tile (absolute position mod kKvTile), never on the other queries,
// on how many keys the tile holds past the query's last visible one, or on R.
//
// S provides: W, V, zero, set1, load, store, add, mul, fmadd, max, hsum, hmax, transpose_sum
// (W accumulators -> lane t = sum of acc[t]), exp (0 below -87.3, -inf included), and widen_<dtype>
// (W stored elements -> W floats; e4m3 gives value / 256).
//
// NOTE: deliberately in an anonymous namespace (see attention_tile.h).
#pragma once
#include <cstdint>
#include <cstring>

#include "kernels/cpu/attention_tile.h"

namespace inflight::kernels::cpu {
namespace {

constexpr float kNegInf = -__builtin_inff();

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

  // Stages rows [0, n) of `rows` into dst ([round_up(n, W), pdim]); row scales (Int8 with one group
  // per row) go to row_scale, padded keys get zero rows.
  template <KvDType T>
  static void stage_rows(const TileArgs& a, const void* const* rows, const float* const* scales, int dim,
                         float* dst, float* row_scale) {
    const int pdim = padded_dim(dim);
    const int n = a.num_keys;
    const bool per_row = T == KvDType::Int8 && a.quant_group == dim;
    for (int j = 0; j < n; ++j) {
      const float* group = T == KvDType::Int8 && !per_row ? scales[j] : nullptr;
      stage_row<T>(rows[j], dim, pdim, group, a.quant_group, dst + int64_t(j) * pdim);
      if (per_row) row_scale[j] = scales[j][0];
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

  template <int NV>
  static void accumulate_v(const float* w, int lo, int hi, const float* vst, int pdim_v, float* o) {
    V acc[NV];
#pragma GCC unroll 8
    for (int c = 0; c < NV; ++c) acc[c] = S::zero();
    for (int j = lo; j < hi; ++j) {
      const V wj = S::set1(w[j]);
      const float* vj = vst + int64_t(j) * pdim_v;
#pragma GCC unroll 8
      for (int c = 0; c < NV; ++c) acc[c] = S::fmadd(wj, S::load(vj + c * W), acc[c]);
    }
#pragma GCC unroll 8
    for (int c = 0; c < NV; ++c) S::store(o + c * W, acc[c]);
  }

  // o[0, pdim_v) = sum_{j in [lo, hi)} w[j] * vst[j], in chunks of at most 8 vectors.
  static void weighted_sum(const float* w, int lo, int hi, const float* vst, int pdim_v, float* o) {
    int c0 = 0;
    for (; c0 + 8 * W <= pdim_v; c0 += 8 * W) accumulate_v<8>(w, lo, hi, vst + c0, pdim_v, o + c0);
    if (c0 + 4 * W <= pdim_v) {
      accumulate_v<4>(w, lo, hi, vst + c0, pdim_v, o + c0);
      c0 += 4 * W;
    }
    if (c0 + 2 * W <= pdim_v) {
      accumulate_v<2>(w, lo, hi, vst + c0, pdim_v, o + c0);
      c0 += 2 * W;
    }
    for (; c0 < pdim_v; c0 += W) accumulate_v<1>(w, lo, hi, vst + c0, pdim_v, o + c0);
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
    float global = 1.0f;  // per-tensor factor of both K and V values
    if constexpr (T == KvDType::Int8Static || T == KvDType::Fp8E5M2) global = a.quant_orig;
    if constexpr (T == KvDType::Fp8E4M3) global = a.quant_orig * kFp8E4M3ViaF16Scale;

    stage_rows<T>(a, a.k_rows, a.k_scales, a.head_dim, kst, rk);
    const V score_scale = S::set1(a.scale * global);
    for (int r = 0; r < R; ++r) {
      const float* qr = a.q + int64_t(r) * pdim;
      float* s = sc + int64_t(r) * kKvTile;
      for (int j0 = 0; j0 < n_pad; j0 += W) {
        V acc[W];
#pragma GCC unroll 16
        for (int t = 0; t < W; ++t) acc[t] = S::zero();
        const float* k0 = kst + int64_t(j0) * pdim;
        for (int i = 0; i < pdim; i += W) {
          const V qv = S::load(qr + i);
#pragma GCC unroll 16
          for (int t = 0; t < W; ++t) acc[t] = S::fmadd(qv, S::load(k0 + int64_t(t) * pdim + i), acc[t]);
        }
        V dots = S::mul(S::transpose_sum(acc), score_scale);
        if (per_row) dots = S::mul(dots, S::load(rk + j0));
        S::store(s + j0, dots);
      }
      mask_scores(a, r, n_pad, s);
    }

    stage_rows<T>(a, a.v_rows, a.v_scales, a.head_dim_v, vst, rv);
    for (int r = 0; r < R; ++r) {
      float* s = sc + int64_t(r) * kKvTile;
      float* o = a.o + int64_t(r) * pdim_v;
      V mx = S::set1(kNegInf);
      for (int j = 0; j < n_pad; j += W) mx = S::max(mx, S::load(s + j));
      const float m = S::hmax(mx);
      if (!(m > kNegInf)) {  // no visible key
        a.m[r] = kNegInf;
        a.d[r] = 0.0f;
        for (int i = 0; i < pdim_v; i += W) S::store(o + i, S::zero());
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
      weighted_sum(s, a.lo[r], a.hi[r], vst, pdim_v, o);
      if (global != 1.0f)
        for (int i = 0; i < pdim_v; i += W) S::store(o + i, S::mul(S::load(o + i), S::set1(global)));
    }
  }

  static void attend(const TileArgs& a) {
    switch (a.dtype) {
      case KvDType::F32: run<KvDType::F32>(a); return;
      case KvDType::F16: run<KvDType::F16>(a); return;
      case KvDType::BF16: run<KvDType::BF16>(a); return;
      case KvDType::Int8: run<KvDType::Int8>(a); return;
      case KvDType::Int8Static: run<KvDType::Int8Static>(a); return;
      case KvDType::Fp8E4M3: run<KvDType::Fp8E4M3>(a); return;
      case KvDType::Fp8E5M2: run<KvDType::Fp8E5M2>(a); return;
    }
  }
};

}  // namespace
}  // namespace inflight::kernels::cpu

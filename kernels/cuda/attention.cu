// The CUDA attention kernels (see attention.h): the fused append, the span-state routine, the one-block-
// per-row and the split-K plans with their merge, and the host launchers.
#include "kernels/cuda/attention.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "kernels/cuda/context.h"
#include "kernels/cuda/device_common.cuh"
#include "kernels/ops.h"

namespace inflight::kernels::cuda {

namespace {

using namespace detail;

constexpr int kThreads = 128;                           // per block: 4 warps
constexpr int kWarps = kThreads / 32;
constexpr int kDimsPerThread = kMaxHeadDim / kThreads;  // output features d = tid + kThreads * i
constexpr int kScoresPerThread = kSpanKeys / kThreads;  // score entries jj = tid + kThreads * i

// One row's online-softmax state over some keys, for the output features this thread owns (d = tid +
// kThreads * i) and each of the group's heads: o = sum_j exp(s_j - m) v_j, d = sum_j exp(s_j - m).
// kG: the heads it holds (the kernels' group template, >= the group).
template <int kG>
struct RowState {
  float o[kG][kDimsPerThread];
  float m[kG];
  float d[kG];
};

template <int kG>
__device__ void clear(RowState<kG>& st) {
#pragma unroll
  for (int g = 0; g < kG; ++g) {
    st.m[g] = -INFINITY;
    st.d[g] = 0.0f;
#pragma unroll
    for (int i = 0; i < kDimsPerThread; ++i) st.o[g][i] = 0.0f;
  }
}

// Folds a later span's state (sm, sd, so) into head g's running state. Every plan folds spans left to right
// through this one function, so every plan gives the same bits.
template <int kG>
__device__ void fold(RowState<kG>& st, int g, float sm, float sd, const float* so) {
  if (sm == -INFINITY) return;  // the span saw no key
  if (st.m[g] == -INFINITY) {
    st.m[g] = sm;
    st.d[g] = sd;
#pragma unroll
    for (int i = 0; i < kDimsPerThread; ++i) st.o[g][i] = so[i];
    return;
  }
  const float m = fmaxf(st.m[g], sm);
  const float a = expf(st.m[g] - m), b = expf(sm - m);
  st.m[g] = m;
  st.d[g] = st.d[g] * a + sd * b;
#pragma unroll
  for (int i = 0; i < kDimsPerThread; ++i) st.o[g][i] = st.o[g][i] * a + so[i] * b;
}

// out[t, h0 + g, :] = o / d for this thread's features (a row that saw no key is 0).
template <int kG>
__device__ void store_row(const AttentionParams& p, const RowState<kG>& st, int t, int h0, int group) {
  const int D = p.head_dim_v;
#pragma unroll
  for (int g = 0; g < kG; ++g) {
    if (g >= group) break;
    float* out = p.out + int64_t(t) * p.num_q_heads * D + int64_t(h0 + g) * D;
#pragma unroll
    for (int i = 0; i < kDimsPerThread; ++i) {
      const int d = threadIdx.x + kThreads * i;
      if (d < D) out[d] = st.d[g] > 0.0f ? st.o[g][i] / st.d[g] : 0.0f;
    }
  }
}

// Shared memory of one block. kD: the head dim of the vectorized routine, 0 for the generic one.
template <int kD>
struct SpanSmem {
  static constexpr int kQDim = kD > 0 ? kD : kMaxHeadDim;
  float q[kMaxGroup][kQDim];                              // the row's G query heads, rotated
  float s[kMaxGroup][kSpanKeys];                          // scores of the span's keys, then exp(s - m)
  float red[kMaxGroup][kWarps];                           // per-warp partials of the block reductions
  float o[kD > 0 ? kWarps : 1][kMaxGroup][kD > 0 ? kD : 1];  // per-warp partial outputs (vectorized)
  int blk[kD > 0 ? kSpanKeys : 1];  // physical block of each key of the span, -1 where the row does not see it
};

// Loads query row t's heads [h0, h0 + group) into smem, rotated by the row's RoPE table entry.
template <int kD>
__device__ void load_queries(const AttentionParams& p, const float* rope_cos_sin, int t, int h0, int group,
                             SpanSmem<kD>& sm) {
  const int D = p.head_dim;
  for (int idx = threadIdx.x; idx < group * D; idx += kThreads) {
    const int g = idx / D, d = idx % D;
    sm.q[g][d] = p.q[int64_t(t) * p.q_stride + int64_t(h0 + g) * D + d];
  }
  __syncthreads();
  if (p.rope_on() && threadIdx.x < group)
    rotate_head(p.rope, rope_cos_sin + int64_t(t) * p.rope.rotary_dim, sm.q[threadIdx.x]);
  __syncthreads();
}

// Scores in sm.s -> m, weights exp(s - m) in sm.s, d = their sum: each thread over its entries in order, a
// butterfly per warp, the warps in order.
template <int kD, int kG>
__device__ void span_softmax(SpanSmem<kD>& sm, int group, float* m_out, float* d_out) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int g = 0; g < kG; ++g) {
    if (g >= group) break;
    float x = -INFINITY;
#pragma unroll
    for (int i = 0; i < kScoresPerThread; ++i) x = fmaxf(x, sm.s[g][threadIdx.x + kThreads * i]);
    x = warp_max(x);
    if (lane == 0) sm.red[g][warp] = x;
  }
  __syncthreads();
#pragma unroll
  for (int g = 0; g < kG; ++g) {
    if (g >= group) break;
    float m = sm.red[g][0];
    for (int w = 1; w < kWarps; ++w) m = fmaxf(m, sm.red[g][w]);
    m_out[g] = m;
  }
  __syncthreads();
#pragma unroll
  for (int g = 0; g < kG; ++g) {
    if (g >= group) break;
    float x = 0.0f;
#pragma unroll
    for (int i = 0; i < kScoresPerThread; ++i) {
      float& s = sm.s[g][threadIdx.x + kThreads * i];
      s = s == -INFINITY ? 0.0f : expf(s - m_out[g]);
      x += s;
    }
    x = warp_sum(x);
    if (lane == 0) sm.red[g][warp] = x;
  }
  __syncthreads();
#pragma unroll
  for (int g = 0; g < kG; ++g) {
    if (g >= group) break;
    float d = sm.red[g][0];
    for (int w = 1; w < kWarps; ++w) d += sm.red[g][w];
    d_out[g] = d;
  }
}

// The state of row t (heads h0 .. h0 + group - 1 of KV head kv_head) over span `span` (keys [span * 512,
// span * 512 + 512) within [r.lo, r.hi]), returned in (m, d, o) with o for this thread's features.
// Generic routine: any head dim; a warp per key, lanes over features, kv_dequantize element by element.
template <KvDType kT>
__device__ void span_state(const AttentionParams& p, const RowInfo& r, int kv_head, int h0, int group, int64_t span,
                           SpanSmem<0>& sm, float* m_out, float* d_out, float (*o_out)[kDimsPerThread]) {
  const PagedKvView& kv = p.kv;
  const int D = p.head_dim;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t k0 = span * kSpanKeys;
  const int64_t j_first = max(k0, r.lo), j_last = min(k0 + kSpanKeys - 1, r.hi);

  for (int jj = warp; jj < kSpanKeys; jj += kWarps) {
    const int64_t j = k0 + jj;
    const bool visible = j >= j_first && j <= j_last;  // warp-uniform
    float acc[kMaxGroup];
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) acc[g] = 0.0f;
    if (visible) {
      const int64_t block = kv.block_of(p.kv_seq(r.seq, j), j);
      const int slot = int(j % kv.block_size);
      const void* krow = kv.row(block, 0, kv_head, slot);
      const KvRowScales ks = kv.row_scales(block, 0, kv_head, slot);
      for (int d = lane; d < D; d += 32) {
        const float kd = kv_dequantize(kT, krow, d, ks);
#pragma unroll
        for (int g = 0; g < kMaxGroup; ++g)
          if (g < group) acc[g] += sm.q[g][d] * kd;
      }
#pragma unroll
      for (int g = 0; g < kMaxGroup; ++g)
        if (g < group) acc[g] = warp_sum(acc[g]);
    }
    if (lane == 0) {
#pragma unroll
      for (int g = 0; g < kMaxGroup; ++g)
        if (g < group) sm.s[g][jj] = visible ? score_of(p, r, h0 + g, j, acc[g]) : -INFINITY;
    }
  }
  __syncthreads();
  span_softmax<0, kMaxGroup>(sm, group, m_out, d_out);

  // o = sum_j w_j v_j: threads over features, keys in order.
#pragma unroll
  for (int g = 0; g < kMaxGroup; ++g)
#pragma unroll
    for (int i = 0; i < kDimsPerThread; ++i) o_out[g][i] = 0.0f;
  for (int64_t j = j_first; j <= j_last; ++j) {
    const int64_t block = kv.block_of(p.kv_seq(r.seq, j), j);
    const int slot = int(j % kv.block_size);
    const void* vrow = kv.row(block, 1, kv_head, slot);
    const KvRowScales vs = kv.row_scales(block, 1, kv_head, slot);
#pragma unroll
    for (int i = 0; i < kDimsPerThread; ++i) {
      const int d = threadIdx.x + kThreads * i;
      if (d >= D) break;
      const float vd = kv_dequantize(kT, vrow, d, vs);
#pragma unroll
      for (int g = 0; g < kMaxGroup; ++g)
        if (g < group) o_out[g][i] += sm.s[g][j - k0] * vd;
    }
  }
  __syncthreads();  // sm.s is rewritten by the next span
}

// Sums each of a[0, kV) over the lanes of a key group (kl: the lane's index in it; kOff: half their count) by
// reduce-scatter: each step a lane keeps half of its values, adds its partner's copy of that half and passes
// on the other, so a value costs one shuffle per halving rather than one per step. The lane ends with
// max(kV / lanes, 1) whole sums, of a[first ...]; once values run out, butterflies finish the steps.
template <int kV, int kOff>
__device__ __forceinline__ void reduce_scatter(float* a, int kl, int& first) {
  if constexpr (kOff > 0) {
    if constexpr (kV > 1) {
      const bool upper = (kl & kOff) != 0;
#pragma unroll
      for (int i = 0; i < kV / 2; ++i) {
        const float send = upper ? a[i] : a[i + kV / 2];
        const float keep = upper ? a[i + kV / 2] : a[i];
        a[i] = keep + __shfl_xor_sync(0xffffffffu, send, kOff);
      }
      if (upper) first += kV / 2;
      reduce_scatter<kV / 2, kOff / 2>(a, kl, first);
    } else {
      a[0] += __shfl_xor_sync(0xffffffffu, a[0], kOff);
      reduce_scatter<1, kOff / 2>(a, kl, first);
    }
  }
}

// The vectorized routine for head dim kD (64 or 128) and groups of up to kG query heads. A key row is read by
// kD / kN lanes, kN features (one 16-byte load) each, so a warp reads 32 / (kD / kN) rows at a time; each
// lane keeps its kN query features of every head in registers. The keys are read kUnroll rows per lane
// group at once, each iteration's rows fetched during the iteration before (every load issued before the first
// multiply on it), and the physical blocks of the span's keys are looked up once, for K and V both. One-byte
// codes are multiplied by their scale once per 8 codes. Same state, same thread-to-feature mapping of o, as the generic
// routine; every multiply-add is an explicit fmaf.
template <KvDType kT, int kD, int kG>
__device__ void span_state(const AttentionParams& p, const RowInfo& r, int kv_head, int h0, int group, int64_t span,
                           SpanSmem<kD>& sm, float* m_out, float* d_out, float (*o_out)[kDimsPerThread]) {
  // Features per lane: 8 (16 bytes of f16); 16 for one-byte codes, so that their loads are 16 bytes too and a
  // lane group covers twice the keys (not for groups of 8: their queries would need 128 registers).
  constexpr int kN = kElemBytes<kT> == 1 && kG <= 4 ? 16 : 8;
  constexpr int kLanesPerKey = kD / kN;
  constexpr int kKeysPerWarp = 32 / kLanesPerKey;
  constexpr int kKeyGroups = kWarps * kKeysPerWarp;
  // Rows per lane group and iteration (registers: q is kN x kG). Each iteration's rows are fetched during the
  // one before, so 2 x kUnroll rows are in flight while a lane computes.
  constexpr int kUnroll = kG == 8 ? 2 : 4;
  constexpr int kStep = kKeyGroups * kUnroll;  // keys per block iteration; divides kSpanKeys
  static_assert(kSpanKeys % kStep == 0);
  const PagedKvView& kv = p.kv;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int kl = lane % kLanesPerKey, kg = warp * kKeysPerWarp + lane / kLanesPerKey;
  const int64_t k0 = span * kSpanKeys;
  const int64_t j_first = max(k0, r.lo), j_last = min(k0 + kSpanKeys - 1, r.hi);

  for (int jj = threadIdx.x; jj < kSpanKeys; jj += kThreads) {
    const int64_t j = k0 + jj;
    sm.blk[jj] = j >= j_first && j <= j_last ? kv.block_of(p.kv_seq(r.seq, j), j) : -1;
  }
  const int first_blk = kv.block_of(p.kv_seq(r.seq, j_first), j_first);  // the span has a key the row sees
  // The K (which = 0) or V rows of keys base + u * kKeyGroups + kg; a key the row does not see reads the first
  // one's row (widen zeroes it).
  const ScaleGroups<kN> groups = scale_groups<kT, kN>(kl * kN, kv.quant_group);
  auto fetch_rows = [&](int which, int base, Raw<kT, kN>(&raw)[kUnroll]) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int jj = base + u * kKeyGroups + kg;
      const int blk = sm.blk[jj] >= 0 ? sm.blk[jj] : first_blk;
      const int slot = int((sm.blk[jj] >= 0 ? k0 + jj : j_first) & (kv.block_size - 1));
      fetch<kT, kN>(kv.row(blk, which, kv_head, slot), kl * kN, kv.row_scales(blk, which, kv_head, slot), groups,
                    raw[u]);
    }
  };
  float q[kG][kN];
#pragma unroll
  for (int g = 0; g < kG; ++g)
#pragma unroll
    for (int e = 0; e < kN; ++e) q[g][e] = g < group ? sm.q[g][kl * kN + e] : 0.0f;
  __syncthreads();

  Raw<kT, kN> raw[kUnroll], next[kUnroll];
  fetch_rows(0, 0, raw);
  for (int base = 0; base < kSpanKeys; base += kStep) {
    // The next iteration's K rows stream in while these are used; the last iteration fetches V's first rows.
    if (base + kStep < kSpanKeys) fetch_rows(0, base + kStep, next);
    else fetch_rows(1, 0, next);
    // This lane's partial dot products, a[u * kG + g], widened one row at a time (registers).
    float a[kUnroll * kG];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float x[kN];
      widen<kT, kN, !kScaledCodes<kT>>(raw[u], sm.blk[base + u * kKeyGroups + kg] >= 0, x);
#pragma unroll
      for (int g = 0; g < kG; ++g) {
        float acc = 0.0f;
        if constexpr (kScaledCodes<kT>) {  // the dot of each 8 codes, times their scale
#pragma unroll
          for (int c = 0; c < kN / 8; ++c) {
            float dot = 0.0f;
#pragma unroll
            for (int e = 8 * c; e < 8 * c + 8; ++e) dot = fmaf(q[g][e], x[e], dot);
            acc = fmaf(dot, raw[u].scale[c], acc);
          }
        } else {
#pragma unroll
          for (int e = 0; e < kN; ++e) acc = fmaf(q[g][e], x[e], acc);
        }
        a[u * kG + g] = acc;
      }
    }
    // Sum the partials over the key's lanes: reduce_scatter leaves this lane kReduced whole sums, of
    // a[first ...], and where lanes outnumber values, copies in the lanes whose low bits differ.
    constexpr int kValues = kUnroll * kG;
    constexpr int kReduced = kValues >= kLanesPerKey ? kValues / kLanesPerKey : 1;
    constexpr int kCopies = kValues >= kLanesPerKey ? 1 : kLanesPerKey / kValues;
    int first = 0;
    reduce_scatter<kValues, kLanesPerKey / 2>(a, kl, first);
    if (kl % kCopies == 0) {
#pragma unroll
      for (int i = 0; i < kReduced; ++i) {
        const int u = (first + i) / kG, g = (first + i) % kG;
        const int jj = base + u * kKeyGroups + kg;
        if (g < group) sm.s[g][jj] = sm.blk[jj] >= 0 ? score_of(p, r, h0 + g, k0 + jj, a[i]) : -INFINITY;
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) raw[u] = next[u];
  }
  __syncthreads();
  span_softmax<kD, kG>(sm, group, m_out, d_out);
  __syncthreads();

  // o: each key group sums its keys in order; the key groups of a warp by a butterfly, the warps in order.
  float o[kG][kN];
#pragma unroll
  for (int g = 0; g < kG; ++g)
#pragma unroll
    for (int e = 0; e < kN; ++e) o[g][e] = 0.0f;
  for (int base = 0; base < kSpanKeys; base += kStep) {  // raw: V rows of keys from base
    if (base + kStep < kSpanKeys) fetch_rows(1, base + kStep, next);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int jj = base + u * kKeyGroups + kg;
      float x[kN];
      widen<kT, kN, !kScaledCodes<kT>>(raw[u], sm.blk[jj] >= 0, x);
#pragma unroll
      for (int g = 0; g < kG; ++g) {
        const float w = g < group ? sm.s[g][jj] : 0.0f;  // 0 for a key the row does not see
#pragma unroll
        for (int c = 0; c < kN / 8; ++c) {  // one-byte codes: the weight times the scale of each 8 codes
          const float wc = kScaledCodes<kT> ? w * raw[u].scale[c] : w;
#pragma unroll
          for (int e = 8 * c; e < 8 * c + 8; ++e) o[g][e] = fmaf(wc, x[e], o[g][e]);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) raw[u] = next[u];
  }
#pragma unroll
  for (int g = 0; g < kG; ++g)
#pragma unroll
    for (int e = 0; e < kN; ++e)
#pragma unroll
      for (int off = kLanesPerKey; off < 32; off *= 2) o[g][e] += __shfl_xor_sync(0xffffffffu, o[g][e], off);
  if (lane < kLanesPerKey) {
#pragma unroll
    for (int g = 0; g < kG; ++g)
      if (g < group)
#pragma unroll
        for (int e = 0; e < kN; ++e) sm.o[warp][g][kl * kN + e] = o[g][e];
  }
  __syncthreads();
#pragma unroll
  for (int g = 0; g < kG; ++g)
#pragma unroll
    for (int i = 0; i < kDimsPerThread; ++i) {
      const int d = threadIdx.x + kThreads * i;
      float sum = 0.0f;
      if (g < group && d < kD) {
        sum = sm.o[0][g][d];
        for (int w = 1; w < kWarps; ++w) sum += sm.o[w][g][d];
      }
      o_out[g][i] = sum;
    }
  __syncthreads();  // sm.s, sm.blk and sm.o are rewritten by the next span
}

template <KvDType kT, int kD, int kG>
__device__ void span_state_of(const AttentionParams& p, const RowInfo& r, int kv_head, int h0, int group,
                              int64_t span, SpanSmem<kD>& sm, float* m, float* d, float (*o)[kDimsPerThread]) {
  if constexpr (kD == 0) span_state<kT>(p, r, kv_head, h0, group, span, sm, m, d, o);
  else span_state<kT, kD, kG>(p, r, kv_head, h0, group, span, sm, m, d, o);
}

// ---- kernels ----

// One thread per (token, KV head, K or V): K rotated then quantized, V quantized, into slot_mapping[t].
template <KvDType kT>
__global__ void append_kernel(AttentionParams p, int64_t num_tokens, const float* rope_cos_sin) {
  const PagedKvView& kv = p.kv;
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= num_tokens * kv.num_kv_heads * 2) return;
  const int64_t t = idx / (kv.num_kv_heads * 2);
  const int h = int(idx / 2 % kv.num_kv_heads);
  const int which = int(idx % 2);
  const int64_t slot = p.slot_mapping[t];
  if (slot < 0) return;  // a padding token: nothing to store
  const int64_t block = slot / kv.block_size;
  const int in_block = int(slot % kv.block_size);
  void* dst = kv.row(block, which, h, in_block);
  const KvRowScales scales = kv.row_scales(block, which, h, in_block);
  if (which == 1) {
    kv_quantize_row(kT, p.v + t * p.v_stride + int64_t(h) * kv.head_dim, kv.head_dim, dst, scales);
    return;
  }
  float row[kMaxHeadDim];  // [head_dim] one K head, rotated
  const float* k = p.k + t * p.k_stride + int64_t(h) * kv.head_dim;
  for (int d = 0; d < kv.head_dim; ++d) row[d] = k[d];
  if (p.rope_on()) rotate_head(p.rope, rope_cos_sin + t * p.rope.rotary_dim, row);
  kv_quantize_row(kT, row, kv.head_dim, dst, scales);
}

// Grid (rows, span slots, KV heads). spans_per_block < 0: one slot; the block walks every span of its row,
// folding as it goes, and stores the row. Else slot y computes spans [y * spans_per_block, ...) of its row and
// stores each span's state: ws[((x * Nq + h) * max_spans + span) * (D + 2)] = o[D], m, d, x = blockIdx.x (the
// row's place in the list). rows: the packed rows to compute (rows[x]), or null for every row (x itself).
template <KvDType kT, int kD, int kG>
// 128 registers; 168 for one-byte codes (16 features per lane), 255 for groups of 8.
__global__ void __launch_bounds__(kThreads, kG == 8 ? 2 : kElemBytes<kT> == 1 && kG == 4 ? 3 : 4)
    attend_kernel(AttentionParams p, const float* rope_cos_sin, const int32_t* rows, float* ws, int max_spans,
                  int spans_per_block) {
  __shared__ SpanSmem<kD> sm;
  const int t = rows != nullptr ? rows[blockIdx.x] : int(blockIdx.x), kv_head = blockIdx.z;
  const int group = p.num_q_heads / p.num_kv_heads, h0 = kv_head * group;
  const int D = p.head_dim_v;
  const RowInfo r = row_info(p, t);
  float m[kG], d[kG], o[kG][kDimsPerThread];
  if (spans_per_block < 0) {
    load_queries(p, rope_cos_sin, t, h0, group, sm);
    RowState<kG> st;
    clear(st);
    if (r.hi >= r.lo) {
      for (int64_t span = r.lo / kSpanKeys; span <= r.hi / kSpanKeys; ++span) {
        span_state_of<kT, kD, kG>(p, r, kv_head, h0, group, span, sm, m, d, o);
#pragma unroll
        for (int g = 0; g < kG; ++g)
          if (g < group) fold(st, g, m[g], d[g], o[g]);
      }
    }
    store_row(p, st, t, h0, group);
    return;
  }
  if (r.hi < r.lo) return;
  const int64_t first = max(r.lo / kSpanKeys, int64_t(blockIdx.y) * spans_per_block);
  const int64_t last = min(r.hi / kSpanKeys, int64_t(blockIdx.y + 1) * spans_per_block - 1);
  if (first > last) return;
  load_queries(p, rope_cos_sin, t, h0, group, sm);
  for (int64_t span = first; span <= last; ++span) {
    span_state_of<kT, kD, kG>(p, r, kv_head, h0, group, span, sm, m, d, o);
#pragma unroll
    for (int g = 0; g < kG; ++g) {
      if (g >= group) break;
      float* st = ws + ((int64_t(blockIdx.x) * p.num_q_heads + h0 + g) * max_spans + span) * (D + 2);
#pragma unroll
      for (int i = 0; i < kDimsPerThread; ++i) {
        const int dd = threadIdx.x + kThreads * i;
        if (dd < D) st[dd] = o[g][i];
      }
      if (threadIdx.x == 0) {
        st[D] = m[g];
        st[D + 1] = d[g];
      }
    }
  }
}

// Grid (rows, query heads): folds row t's span states left to right, as attend_kernel's one-slot plan does.
__global__ void __launch_bounds__(kThreads)
    merge_kernel(AttentionParams p, const int32_t* rows, const float* ws, int max_spans) {
  const int t = rows != nullptr ? rows[blockIdx.x] : int(blockIdx.x), h = blockIdx.y;
  const int D = p.head_dim_v;
  const RowInfo r = row_info(p, t);
  RowState<1> st;
  clear(st);
  if (r.hi >= r.lo) {
#pragma unroll 4  // the states' loads of 4 spans in flight together
    for (int64_t span = r.lo / kSpanKeys; span <= r.hi / kSpanKeys; ++span) {
      const float* s = ws + ((int64_t(blockIdx.x) * p.num_q_heads + h) * max_spans + span) * (D + 2);
      float o[kDimsPerThread];
#pragma unroll
      for (int i = 0; i < kDimsPerThread; ++i) {
        const int d = threadIdx.x + kThreads * i;
        o[i] = d < D ? s[d] : 0.0f;
      }
      fold(st, 0, s[D], s[D + 1], o);
    }
  }
  store_row(p, st, t, h, 1);
}

// ---- launchers ----

template <KvDType kT>
struct LaunchAppend {
  static void run(const AttentionParams& p, const BatchShape& shape, cudaStream_t stream) {
    const int64_t n = int64_t(shape.num_tokens) * p.kv.num_kv_heads * 2;
    append_kernel<kT><<<unsigned((n + kThreads - 1) / kThreads), kThreads, 0, stream>>>(p, shape.num_tokens,
                                                                                        shape.rope_cos_sin);
  }
};

// The span routine over num_rows rows: rows[i] (device), or rows 0 .. num_rows - 1 where rows is null.
struct RowList {
  const int32_t* rows;
  int num_rows;
};

template <KvDType kT>
struct LaunchAttend {
  template <int kD, int kG>
  static void launch(const AttentionParams& p, const BatchShape& shape, RowList list, int spans_per_block,
                     Workspace& ws, cudaStream_t stream) {
    const unsigned n = unsigned(list.num_rows);
    if (spans_per_block < 0) {
      attend_kernel<kT, kD, kG><<<dim3(n, 1, unsigned(p.num_kv_heads)), kThreads, 0, stream>>>(
          p, shape.rope_cos_sin, list.rows, nullptr, 0, -1);
      return;
    }
    const int max_spans = std::max(1, (shape.max_kv_len + kSpanKeys - 1) / kSpanKeys);
    const int slots = (max_spans + spans_per_block - 1) / spans_per_block;
    float* states = ws.get(int64_t(n) * p.num_q_heads * max_spans * (p.head_dim_v + 2));
    attend_kernel<kT, kD, kG><<<dim3(n, unsigned(slots), unsigned(p.num_kv_heads)), kThreads, 0, stream>>>(
        p, shape.rope_cos_sin, list.rows, states, max_spans, spans_per_block);
    merge_kernel<<<dim3(n, unsigned(p.num_q_heads)), kThreads, 0, stream>>>(p, list.rows, states, max_spans);
  }
  // The group template: the smallest of 1, 2, 4, 8 that holds the GQA group.
  template <int kD>
  static void launch_group(const AttentionParams& p, const BatchShape& shape, RowList list, int spans_per_block,
                           Workspace& ws, cudaStream_t stream) {
    const int group = p.num_q_heads / p.num_kv_heads;
    if (group == 1) launch<kD, 1>(p, shape, list, spans_per_block, ws, stream);
    else if (group == 2) launch<kD, 2>(p, shape, list, spans_per_block, ws, stream);
    else if (group <= 4) launch<kD, 4>(p, shape, list, spans_per_block, ws, stream);
    else launch<kD, 8>(p, shape, list, spans_per_block, ws, stream);
  }
  static void run(const AttentionParams& p, const BatchShape& shape, RowList list, int spans_per_block,
                  Workspace& ws, cudaStream_t stream) {
    switch (vector_head_dim(p)) {
      case 64: launch_group<64>(p, shape, list, spans_per_block, ws, stream); return;
      case 128: launch_group<128>(p, shape, list, spans_per_block, ws, stream); return;
      default: launch<0, kMaxGroup>(p, shape, list, spans_per_block, ws, stream); return;
    }
  }
};

// data with room for at least n elements: a new allocation when it has less (what it held is gone).
template <class T>
T* grow(T*& data, int64_t& capacity, int64_t n) {
  if (n > capacity) {
    if (data != nullptr) INFLIGHT_CUDA_CHECK(cudaFree(data));  // synchronizes: no kernel still reads it
    data = nullptr;
    INFLIGHT_CUDA_CHECK(cudaMalloc(&data, size_t(n) * sizeof(T)));
    capacity = n;
  }
  return data;
}

}  // namespace

Workspace::~Workspace() {
  if (data_ != nullptr) cudaFree(data_);
  if (ints_ != nullptr) cudaFree(ints_);
}

int32_t* Workspace::upload(const std::vector<int32_t>& host, cudaStream_t stream) {
  if (ints_ != nullptr && host == uploaded_) return ints_;  // read-only on the device: still there
  grow(ints_, ints_capacity_, int64_t(host.size()));
  INFLIGHT_CUDA_CHECK(cudaMemcpyAsync(ints_, host.data(), host.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
  uploaded_ = host;
  return ints_;
}

float* Workspace::get(int64_t num_floats) { return grow(data_, capacity_, num_floats); }

bool device_available(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error of a missing driver
    if (why != nullptr) *why = std::string("no CUDA device (") + cudaGetErrorString(e) + ")";
    return false;
  }
  if (count == 0) {
    if (why != nullptr) *why = "no CUDA device";
    return false;
  }
  return true;
}

void rope_table(const RopeParams& rope, const int32_t* positions, int64_t num_tokens, std::vector<float>* out) {
  const int pairs = rope.rotary_dim / 2;
  std::vector<float> freq(size_t(std::max(pairs, 0)));  // [pairs] radians per position
  rope_frequencies(rope, freq.data());
  out->assign(size_t(std::max<int64_t>(num_tokens, 0)) * size_t(rope.rotary_dim), 0.0f);
  for (int64_t t = 0; t < num_tokens; ++t)
    rope_cos_sin(rope, freq.data(), float(positions[t]), out->data() + t * rope.rotary_dim);
}

void check_params(const AttentionParams& p, const char* file, int line) {
  const char* bad = nullptr;
  if (p.num_kv_heads <= 0 || p.num_q_heads % p.num_kv_heads != 0) bad = "num_q_heads must be a multiple of num_kv_heads";
  else if (p.num_q_heads / p.num_kv_heads > kMaxGroup) bad = "GQA group larger than kMaxGroup (8)";
  else if (p.head_dim <= 0 || p.head_dim > kMaxHeadDim) bad = "head_dim must be in [1, 256]";
  else if (p.head_dim_v != p.head_dim || p.kv.head_dim != p.head_dim) bad = "the paged cache needs head_dim_v == head_dim";
  else if (p.kv.num_kv_heads != p.num_kv_heads) bad = "kv.num_kv_heads != num_kv_heads";
  else if (p.kv.dtype == KvDType::Int8 && (p.kv.quant_group < 8 || p.head_dim % p.kv.quant_group != 0))
    bad = "int8 quant_group must be >= 8 and divide head_dim";
  else if (p.rope_on() && (p.rope.rotary_dim % 2 != 0 || p.rope.rotary_dim > p.head_dim))
    bad = "rotary_dim must be even and <= head_dim";
  if (bad == nullptr) return;
  std::fprintf(stderr, "%s:%d: cuda attention: %s\n", file, line, bad);
  std::abort();
}

void append_kv(const AttentionParams& p, const BatchShape& shape, cudaStream_t stream) {
  check_params(p, __FILE__, __LINE__);
  if (p.k == nullptr || shape.num_tokens == 0) return;
  if (p.rope_on() && shape.rope_cos_sin == nullptr) {
    std::fprintf(stderr, "%s:%d: cuda attention: RoPE on but no BatchShape::rope_cos_sin\n", __FILE__, __LINE__);
    std::abort();
  }
  dispatch<LaunchAppend>(p.kv.dtype, p, shape, stream);
  INFLIGHT_CUDA_CHECK(cudaGetLastError());
}

void attend(const AttentionParams& p, const BatchShape& shape, const DecodePlan& plan, Workspace& ws,
            cudaStream_t stream) {
  check_params(p, __FILE__, __LINE__);
  if (shape.num_tokens == 0) return;
  int spans_per_block = plan.spans_per_block;
  if (spans_per_block == 0)  // one block per row and KV head when rows have one span, else one block per span
    spans_per_block = shape.max_kv_len <= kSpanKeys ? -1 : 1;
  RowList list{nullptr, shape.num_tokens};
  if (shape.host_q_start != nullptr && context_supported(p)) {
    // One upload: the decode rows for the span routine, then the prompt tiles (longest rows first: a tile's
    // work grows with its rows' keys, so the long ones start early and the short ones fill in at the end).
    std::vector<int32_t> ints;
    std::vector<ContextTile> tiles;
    for (int s = 0; s < p.num_seqs; ++s) {
      const int32_t a = shape.host_q_start[s], q_len = shape.host_q_start[s + 1] - a;
      if (q_len == 1) ints.push_back(a);
      for (int r = 0; q_len > 1 && r < q_len; r += kContextRows) tiles.push_back({s, r});
    }
    std::stable_sort(tiles.begin(), tiles.end(), [](const ContextTile& x, const ContextTile& y) { return x.row0 > y.row0; });
    const int num_rows = int(ints.size());
    for (const ContextTile& t : tiles) {
      ints.push_back(t.seq);
      ints.push_back(t.row0);
    }
    if (ints.empty()) return;
    const int32_t* dev = ws.upload(ints, stream);
    attend_context(p, shape, reinterpret_cast<const ContextTile*>(dev + num_rows), int(tiles.size()), stream);
    list = RowList{dev, num_rows};
  }
  if (list.num_rows > 0) dispatch<LaunchAttend>(p.kv.dtype, p, shape, list, spans_per_block, ws, stream);
  INFLIGHT_CUDA_CHECK(cudaGetLastError());
}

void attention(const AttentionParams& p, const BatchShape& shape, Workspace& ws, cudaStream_t stream) {
  append_kv(p, shape, stream);
  attend(p, shape, DecodePlan{}, ws, stream);
}

}  // namespace inflight::kernels::cuda

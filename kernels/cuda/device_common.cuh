// Device helpers shared by the CUDA attention kernels (attention.cu: append, span states, merge; context.cu:
// the tensor-core prompt kernel): where a packed row sits, its scores, and reading stored K/V rows.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/attention_params.h"
#include "kernels/cuda/cuda_check.h"

namespace inflight::kernels::cuda::detail {

__device__ inline float warp_sum(float x) {
  for (int off = 16; off > 0; off /= 2) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}
__device__ inline float warp_max(float x) {
  for (int off = 16; off > 0; off /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, off));
  return x;
}

// The sequence owning packed row t: the last s with q_start[s] <= t (empty sequences are skipped over).
__device__ inline int seq_of_row(const AttentionParams& p, int t) {
  int lo = 0, hi = p.num_seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (p.q_start[mid] <= t) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// Where packed row t sits: its sequence, its index i among the sequence's rows, and the keys [lo, hi] it sees
// (the band mask over the sequence's past_len + q_len cached keys; hi < lo: none).
struct RowInfo {
  int seq;
  int64_t i, lo, hi;
};
// Row i of sequence seq.
__device__ inline RowInfo row_at(const AttentionParams& p, int seq, int64_t i) {
  RowInfo r;
  r.seq = seq;
  r.i = i;
  const int64_t total = int64_t(p.past_len[seq]) + (p.q_start[seq + 1] - p.q_start[seq]);
  const int64_t pos = p.past_len[seq] + i;
  r.lo = p.pre_tokens < 0 ? 0 : max(int64_t(0), pos - p.pre_tokens);
  r.hi = p.next_tokens < 0 ? total - 1 : min(total - 1, pos + int64_t(p.next_tokens));
  return r;
}
// Packed row t.
__device__ inline RowInfo row_info(const AttentionParams& p, int t) {
  const int seq = seq_of_row(p, t);
  return row_at(p, seq, t - p.q_start[seq]);
}

// The score of key j for head h0 + g from its dot product: scale, softcap, then the mask (reference order).
__device__ inline float score_of(const AttentionParams& p, const RowInfo& r, int head, int64_t j, float dot) {
  float s = dot * p.effective_scale();
  if (p.softcap > 0.0f) s = p.softcap * tanhf(s / p.softcap);
  const int64_t at = int64_t(r.seq) * p.mask.seq_stride + int64_t(head) * p.mask.head_stride + r.i * p.mask.row_stride + j;
  if (p.mask.kind == MaskKind::Bool && static_cast<const uint8_t*>(p.mask.data)[at] != 0) s = -INFINITY;
  if (p.mask.kind == MaskKind::Additive) s += static_cast<const float*>(p.mask.data)[at];
  return s;
}

// The stored bytes of kN features of a row (kN a multiple of 8) and their scale: fetched first, for every key a
// lane reads in an iteration, then widened, so that the loads of all those keys are in flight together.
template <KvDType kT>
inline constexpr int kElemBytes = kT == KvDType::F32 ? 4 : kT == KvDType::F16 || kT == KvDType::BF16 ? 2 : 1;
template <KvDType kT, int kN>
struct Raw {
  static constexpr int kWords = kN * kElemBytes<kT> >= 16 ? kN * kElemBytes<kT> / 16 : 1;  // uint4s
  uint4 w[kWords];
  float scale[kN / 8];  // of features [8c, 8c + 8)
};

// One-byte codes whose value is code_value * scale, with one scale per 8 features (int8 groups, the per-tensor
// int8 / fp8 scales): the span routine multiplies that scale once per 8 codes instead of once per code.
template <KvDType kT>
inline constexpr bool kScaledCodes = kElemBytes<kT> == 1;

// Which int8 scale group features [d0 + 8c, d0 + 8c + 8) read (quant_group >= 8 divides head_dim, so 8 features
// at a multiple of 8 share one): a lane that fetches the same features of many rows divides once, not per row.
// Other dtypes have no groups (zeros).
template <int kN>
struct ScaleGroups {
  int of[kN / 8];
};
template <KvDType kT, int kN>
__device__ ScaleGroups<kN> scale_groups(int d0, int quant_group) {
  ScaleGroups<kN> g;
#pragma unroll
  for (int c = 0; c < kN / 8; ++c) g.of[c] = kT == KvDType::Int8 ? (d0 + 8 * c) / quant_group : 0;
  return g;
}

template <KvDType kT, int kN>
__device__ void fetch(const void* row, int d0, const KvRowScales& s, const ScaleGroups<kN>& groups, Raw<kT, kN>& r) {
  const uint8_t* at = static_cast<const uint8_t*>(row) + int64_t(d0) * kElemBytes<kT>;
  if constexpr (kN * kElemBytes<kT> >= 16) {
#pragma unroll
    for (int i = 0; i < Raw<kT, kN>::kWords; ++i) r.w[i] = __ldg(reinterpret_cast<const uint4*>(at) + i);
  } else {  // 8 one-byte codes
    const uint2 u = __ldg(reinterpret_cast<const uint2*>(at));
    r.w[0] = make_uint4(u.x, u.y, 0u, 0u);
  }
  // e4m3 codes widen to the value / 256 (fp8_e4m3_to_f16_bits), so their scale carries the 256 (a power of two:
  // the same bits).
#pragma unroll
  for (int c = 0; c < kN / 8; ++c)
    r.scale[c] = kT == KvDType::Int8      ? __ldg(s.group + groups.of[c])
                 : kT == KvDType::Fp8E4M3 ? s.quant_orig * kFp8E4M3ViaF16Scale
                                          : s.quant_orig;
}
template <KvDType kT, int kN>
__device__ void fetch(const void* row, int d0, const KvRowScales& s, Raw<kT, kN>& r) {
  fetch<kT, kN>(row, d0, s, scale_groups<kT, kN>(d0, s.quant_group), r);
}

// Codes e and e + 1 (e even) of a word of four one-byte codes, as the f16 pair whose high bytes they are.
__device__ inline uint32_t code_pair_high_bytes(uint32_t word, int e) {
  return __byte_perm(word, 0u, 0x0404u | (uint32_t(e) << 4) | (uint32_t(e + 1) << 12));
}

// The fetched features as kv_dequantize gives them (the f16 / fp8 widenings are exact, so the hardware
// conversions agree with it), without the scale where kScale is false (kScaledCodes: the caller multiplies
// r.scale[e / 8] in); zeros where !valid (a key the row does not see: its bytes are another row's).
// One-byte codes take one byte-permute per code (int8) or per two codes (fp8) instead of shifts and masks.
template <KvDType kT, int kN, bool kScale = true>
__device__ void widen(const Raw<kT, kN>& r, bool valid, float* x) {
  const uint32_t* w = reinterpret_cast<const uint32_t*>(r.w);
#pragma unroll
  for (int e = 0; e < kN; e += 2) {
    float v[2];
    if constexpr (kT == KvDType::F32) {
      v[0] = __uint_as_float(w[e]);
      v[1] = __uint_as_float(w[e + 1]);
    } else if constexpr (kT == KvDType::F16) {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[e / 2]));
      v[0] = f.x;
      v[1] = f.y;
    } else if constexpr (kT == KvDType::BF16) {
      v[0] = __uint_as_float(w[e / 2] << 16);
      v[1] = __uint_as_float(w[e / 2] & 0xffff0000u);
    } else if constexpr (kT == KvDType::Int8 || kT == KvDType::Int8Static) {
      // code + 128 as the low byte of 2^23's mantissa: 0x4B0000xx is 2^23 + code + 128, exactly.
      const uint32_t biased = w[e / 4] ^ 0x80808080u;
#pragma unroll
      for (int i = 0; i < 2; ++i)
        v[i] = __uint_as_float(__byte_perm(biased, 0x4B000000u, 0x7540u | uint32_t((e + i) % 4))) - 8388736.0f;
    } else {
      uint32_t h = code_pair_high_bytes(w[e / 4], e % 4);  // e5m2 codes are the high bytes of f16s
      if constexpr (kT == KvDType::Fp8E4M3) h = ((h >> 1) & 0x3f803f80u) | (h & 0x80008000u);
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
      v[0] = f.x;
      v[1] = f.y;
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if constexpr (kScaledCodes<kT> && kScale) v[i] *= r.scale[(e + i) / 8];
      x[e + i] = valid ? v[i] : 0.0f;
    }
  }
}

// Runs Launch<dtype>::run(args...) for the cache's dtype: one instantiation per KV dtype.
template <template <KvDType> class Launch, class... Args>
void dispatch(KvDType t, Args&&... args) {
  switch (t) {
    case KvDType::F32: Launch<KvDType::F32>::run(args...); return;
    case KvDType::F16: Launch<KvDType::F16>::run(args...); return;
    case KvDType::BF16: Launch<KvDType::BF16>::run(args...); return;
    case KvDType::Int8: Launch<KvDType::Int8>::run(args...); return;
    case KvDType::Int8Static: Launch<KvDType::Int8Static>::run(args...); return;
    case KvDType::Fp8E4M3: Launch<KvDType::Fp8E4M3>::run(args...); return;
    case KvDType::Fp8E5M2: Launch<KvDType::Fp8E5M2>::run(args...); return;
  }
}

// The head dim of the vectorized kernels (64 or 128, every row 16-byte aligned), else 0.
inline int vector_head_dim(const AttentionParams& p) {
  if (p.head_dim != 64 && p.head_dim != 128) return 0;
  return reinterpret_cast<uintptr_t>(p.kv.data) % 16 == 0 ? p.head_dim : 0;
}

}  // namespace inflight::kernels::cuda::detail

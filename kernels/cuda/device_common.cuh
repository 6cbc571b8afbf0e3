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

template <KvDType kT, int kN>
__device__ void fetch(const void* row, int d0, const KvRowScales& s, Raw<kT, kN>& r) {
  const uint8_t* at = static_cast<const uint8_t*>(row) + int64_t(d0) * kElemBytes<kT>;
  if constexpr (kN * kElemBytes<kT> >= 16) {
#pragma unroll
    for (int i = 0; i < Raw<kT, kN>::kWords; ++i) r.w[i] = __ldg(reinterpret_cast<const uint4*>(at) + i);
  } else {  // 8 one-byte codes
    const uint2 u = __ldg(reinterpret_cast<const uint2*>(at));
    r.w[0] = make_uint4(u.x, u.y, 0u, 0u);
  }
  // int8: quant_group >= 8 divides head_dim, so 8 features at a multiple of 8 share one scale.
#pragma unroll
  for (int c = 0; c < kN / 8; ++c)
    r.scale[c] = kT == KvDType::Int8 ? __ldg(s.group + (d0 + 8 * c) / s.quant_group) : s.quant_orig;
}

__device__ inline float half_bits_to_float(uint16_t b) { return __half2float(__ushort_as_half(b)); }
// The int8 code in the low byte of c as a float, exactly, without the quarter-rate integer conversion:
// 0x4B000000 | b is 2^23 + b, and b = code + 128.
__device__ inline float int8_value(uint32_t c) { return __int_as_float(int(0x4B000000u | (c ^ 0x80u))) - 8388736.0f; }

// The fetched features as kv_dequantize gives them (the f16 / fp8 widenings are exact, so the hardware
// conversions agree with it); zeros where !valid (a key the row does not see: its bytes are another row's).
template <KvDType kT, int kN>
__device__ void widen(const Raw<kT, kN>& r, bool valid, float* x) {
  const uint32_t* w = reinterpret_cast<const uint32_t*>(r.w);
#pragma unroll
  for (int e = 0; e < kN; ++e) {
    float v;
    if constexpr (kT == KvDType::F32) {
      v = __uint_as_float(w[e]);
    } else if constexpr (kT == KvDType::F16 || kT == KvDType::BF16) {
      const uint16_t b = uint16_t(w[e / 2] >> (16 * (e % 2)));
      v = kT == KvDType::F16 ? half_bits_to_float(b) : __uint_as_float(uint32_t(b) << 16);
    } else {
      const uint32_t c = (w[e / 4] >> (8 * (e % 4))) & 0xffu;
      if constexpr (kT == KvDType::Int8 || kT == KvDType::Int8Static) v = int8_value(c) * r.scale[e / 8];
      else if constexpr (kT == KvDType::Fp8E4M3)
        v = half_bits_to_float(fp8_e4m3_to_f16_bits(uint8_t(c))) * kFp8E4M3ViaF16Scale * r.scale[e / 8];
      else v = half_bits_to_float(uint16_t(c << 8)) * r.scale[e / 8];
    }
    x[e] = valid ? v : 0.0f;
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

// kernels::NsaParams: Native Sparse Attention's selected-attention forward (seed 001, Ascend's
// NsaSelectedAttention), TND layout. For query token t of a sequence and KV head h, the keys are the
// selected_block_count blocks of selected_block_size consecutive keys named by
// topk_indices[t, h, :] (block i covers the sequence's keys [i * size, (i + 1) * size)), gathered in
// that order; each of the G query heads of h attends to them:
//
//   out = softmax(mask(scale * q . K_sel^T)) V_sel,   softmax_max = max, softmax_sum = sum exp(s - max)
//
// Sparse mode 0: no mask. Sparse mode 2 (leftUpCausal): query row i of a sequence sees keys j <= i (the
// training case S_q == S_kv). A negative block index, or one past the sequence's keys, selects nothing.
// A query that sees no key gets out = 0, softmax_max = -inf, softmax_sum = 0. q, k, v and out share one
// dtype (the seed's BF16 / FLOAT16, and F32); scores, softmax and sums are float, out is rounded once.
#pragma once
#include <cstdint>

#include "kernels/kv_dtype.h"

namespace inflight::kernels {

struct NsaParams {
  const void* q = nullptr;                // [T_q, num_q_heads, head_dim_qk] of dtype
  const void* k = nullptr;                // [T_kv, num_kv_heads, head_dim_qk] of dtype
  const void* v = nullptr;                // [T_kv, num_kv_heads, head_dim_v] of dtype
  KvDType dtype = KvDType::F32;           // of q, k, v and out: F32, F16 or BF16
  const int32_t* topk_indices = nullptr;  // [T_q, num_kv_heads, selected_block_count] block indices
  const int32_t* cu_seqlens_q = nullptr;  // [batch + 1] cumulative query lengths (actual_seq_qlen)
  const int32_t* cu_seqlens_kv = nullptr; // [batch + 1] cumulative key lengths (actual_seq_kvlen)
  int batch = 0;
  int num_q_heads = 0;
  int num_kv_heads = 0;                   // G = num_q_heads / num_kv_heads <= 32
  int head_dim_qk = 0;                    // e.g. 192
  int head_dim_v = 0;                     // <= head_dim_qk, e.g. 128
  int selected_block_size = 0;            // multiple of 16, <= 128
  int selected_block_count = 0;           // <= 32
  float scale = 1.0f;                     // scaleValue
  int sparse_mode = 0;                    // 0: no mask; 2: causal (left-up)
  void* out = nullptr;                    // [T_q, num_q_heads, head_dim_v] of dtype
  float* softmax_max = nullptr;           // [T_q, num_q_heads]
  float* softmax_sum = nullptr;           // [T_q, num_q_heads]
};

namespace reference {
// Gathers the selected K/V rows, plain scores, mask, softmax in float (the oracle).
void nsa_selected_attention(const NsaParams& p);
}  // namespace reference

namespace cpu {
// The tile routine of the attention kernels over the gathered keys, one (token, KV head) per task.
void nsa_selected_attention(const NsaParams& p);
}  // namespace cpu

// Aborts with file:line unless p satisfies the constraints above.
void check_nsa_params(const NsaParams& p, const char* file, int line);

}  // namespace inflight::kernels

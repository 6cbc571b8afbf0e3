// kernels::AttentionParams: one layer's attention over one packed batch. Plain spans and ints; every
// backend (reference/, cpu/, cuda/) implements the same functions on it.
//
// The batch is packed in TensorRT-LLM's order (context tokens first, then generation tokens) with no
// padding. Sequence s owns query rows [q_start[s], q_start[s+1]) at positions past_len[s] + i; its
// K/V for positions [0, past_len[s] + q_len) are in the paged cache when attention runs.
#pragma once
#include <cstdint>

#include "kernels/kv_dtype.h"

namespace inflight::kernels {

// A paged view of one layer of the KV cache, passed by value (FlashInfer's paged_kv_t).
// Storage: [num_blocks, 2 (K, V), num_kv_heads, block_size, head_dim] elements of `dtype`.
struct PagedKvView {
  void* data = nullptr;
  KvDType dtype = KvDType::F32;
  int num_blocks = 0;
  int block_size = 0;  // tokens per block, a power of two
  int num_kv_heads = 0;
  int head_dim = 0;
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq] physical block ids
  int max_blocks_per_seq = 0;

  // Element offset of (block, kv = 0 for K / 1 for V, head, slot in block, feature 0).
  int64_t offset(int64_t block, int kv, int head, int slot) const {
    return (((block * 2 + kv) * num_kv_heads + head) * int64_t(block_size) + slot) * head_dim;
  }
  // Physical block id holding position `pos` of sequence `seq`.
  int32_t block_of(int seq, int64_t pos) const {
    return block_tables[int64_t(seq) * max_blocks_per_seq + pos / block_size];
  }
};

struct AttentionParams {
  // Queries [num_tokens, row stride q_stride], head h at q[t * q_stride + h * head_dim]. RoPE applied.
  const float* q = nullptr;
  int64_t q_stride = 0;
  // Output [num_tokens, num_q_heads * head_dim_v].
  float* out = nullptr;

  int num_q_heads = 0;
  int num_kv_heads = 0;  // GQA group G = num_q_heads / num_kv_heads; query head h reads KV head h / G
  int head_dim = 0;      // for Q·K
  int head_dim_v = 0;    // for V (equals head_dim for Llama)
  float scale = 0.0f;    // multiplies Q·K; default 1/sqrt(head_dim)
  float softcap = 0.0f;  // 0: off; else score = softcap * tanh(score / softcap)
  // Band mask: query at position p sees keys in [p - pre_tokens, p + next_tokens]; -1 = unbounded.
  // Causal attention is next_tokens = 0.
  int pre_tokens = -1;
  int next_tokens = 0;

  int num_seqs = 0;
  const int32_t* q_start = nullptr;   // [num_seqs + 1] cu_seqlens into the packed query rows
  const int32_t* past_len = nullptr;  // [num_seqs] cached tokens before this step's rows
  PagedKvView kv;

  // Beam search cache indirection (TensorRT-LLM's cache_indir [batch, beam, max_seq]): sequence s
  // reads position j from the block table of sequence beam_row0[s] + cache_indir[s * cache_indir_stride
  // + j], i.e. from the beam that wrote it. nullptr: every sequence reads its own K/V.
  const int32_t* cache_indir = nullptr;  // [num_seqs, cache_indir_stride] beam index per position
  int64_t cache_indir_stride = 0;
  const int32_t* beam_row0 = nullptr;    // [num_seqs] batch row of beam 0 of the sequence's group

  // The sequence whose block table holds position `pos` as seen by sequence `seq`.
  int kv_seq(int seq, int64_t pos) const {
    return cache_indir ? beam_row0[seq] + cache_indir[int64_t(seq) * cache_indir_stride + pos] : seq;
  }
};

// Writes the K/V rows of this step into the cache: token t goes to slot slot_mapping[t]
// (= block * block_size + offset). k: [num_tokens, k_stride] with head h at k + h * head_dim; v likewise.
void append_kv(const PagedKvView& kv, const float* k, int64_t k_stride, const float* v, int64_t v_stride,
               const int64_t* slot_mapping, int64_t num_tokens);

namespace reference {
// Plain, obviously-correct attention: for each query row, scores over every visible cached key, softmax,
// weighted sum of V. The oracle for every other backend.
void attention(const AttentionParams& p);
}  // namespace reference

}  // namespace inflight::kernels

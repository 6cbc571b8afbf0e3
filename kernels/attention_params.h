// kernels::AttentionParams: one layer's attention over one packed batch. Plain spans and ints; every
// backend (reference/, cpu/, cuda/) implements the same functions on it.
//
// The batch is packed in TensorRT-LLM's order (context tokens first, then generation tokens) with no
// padding. Sequence s owns query rows [q_start[s], q_start[s+1]) at positions past_len[s] + i; its
// K/V for positions [0, past_len[s] + q_len) are in the paged cache when attention runs, either
// appended before (append_kv) or by the attention call itself (the fused append: `k` set).
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/kv_dtype.h"
#include "kernels/ops.h"

namespace inflight::kernels {

// A paged view of one layer of the KV cache, passed by value (FlashInfer's paged_kv_t).
// Storage: [num_blocks, 2 (K, V), num_kv_heads, block_size, head_dim] elements of `dtype`.
struct PagedKvView {
  void* data = nullptr;                   // [num_blocks, 2, num_kv_heads, block_size, head_dim] of dtype
  KvDType dtype = KvDType::F32;
  int num_blocks = 0;
  int block_size = 0;                     // tokens per block, a power of two
  int num_kv_heads = 0;
  int head_dim = 0;
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq] physical block ids
  int max_blocks_per_seq = 0;
  // Int8 (grouped): one f32 dequant scale per (token, head, group of quant_group channels), laid out
  // like the data with head_dim / quant_group scales per row. nullptr for the other dtypes.
  float* scales = nullptr;                // [num_blocks, 2, num_kv_heads, block_size, head_dim / quant_group]
  int quant_group = 0;                    // channels per scale; divides head_dim, >= 8 (Int8 only)
  // Int8Static / Fp8*: the per-tensor pairs (TensorRT-LLM's kv_orig_quant_scale / kv_quant_orig_scale),
  // one for K ([0]) and one for V ([1]) (K often spans 10x the range of V); orig_quant = 1 / quant_orig.
  float orig_quant_scale[2] = {1.0f, 1.0f};  // [K, V] code = quantize(x * orig_quant_scale)
  float quant_orig_scale[2] = {1.0f, 1.0f};  // [K, V] x = value(code) * quant_orig_scale

  // Element offset of (block, kv = 0 for K / 1 for V, head, slot in block, feature 0).
  INFLIGHT_HD int64_t offset(int64_t block, int kv, int head, int slot) const {
    return (((block * 2 + kv) * num_kv_heads + head) * int64_t(block_size) + slot) * head_dim;
  }
  // Physical block id holding position `pos` of sequence `seq`.
  INFLIGHT_HD int32_t block_of(int seq, int64_t pos) const {
    return block_tables[int64_t(seq) * max_blocks_per_seq + pos / block_size];
  }
  INFLIGHT_HD int num_scale_groups() const { return quant_group > 0 ? head_dim / quant_group : 0; }
  // Start of the stored row (block, kv, head, slot).
  INFLIGHT_HD void* row(int64_t block, int kv, int head, int slot) const {
    return static_cast<uint8_t*>(data) + offset(block, kv, head, slot) * kv_elem_bytes(dtype);
  }
  // The scales that go with row (block, kv, head, slot), for kv_quantize_row / kv_dequantize.
  INFLIGHT_HD KvRowScales row_scales(int64_t block, int kv, int head, int slot) const {
    KvRowScales s;
    if (scales != nullptr)
      s.group = scales + (((block * 2 + kv) * num_kv_heads + head) * int64_t(block_size) + slot) * num_scale_groups();
    s.quant_group = quant_group;
    s.orig_quant = orig_quant_scale[kv];
    s.quant_orig = quant_orig_scale[kv];
    return s;
  }
};

// An optional mask on top of the band mask, with MultiHeadCacheAttention's broadcast shapes
// (Sq, Skv), (N, Sq, Skv) or (B, N, Sq, Skv) expressed as strides. The element for sequence s, query
// head h, the sequence's i-th query row of this step and key position j (0 <= j < past_len + q_len) is
// data[s * seq_stride + h * head_stride + i * row_stride + j].
enum class MaskKind : uint8_t {
  None,
  Bool,      // uint8_t, nonzero = the key is masked out (PromptFlashAttention / NSA convention)
  Additive,  // float added to the score after scale and softcap; -inf masks the key out
};
struct AttentionMask {
  MaskKind kind = MaskKind::None;
  const void* data = nullptr;  // [B or 1, N or 1, Sq, Skv] of uint8_t (Bool) or float (Additive)
  int64_t seq_stride = 0;      // elements; 0 broadcasts over sequences
  int64_t head_stride = 0;     // elements; 0 broadcasts over query heads
  int64_t row_stride = 0;      // elements between query rows (>= the longest sequence's key count)
};

struct AttentionParams {
  // Queries [num_tokens, row stride q_stride], head h at q[t * q_stride + h * head_dim]. Rotated by the
  // kernel when rope.rotary_dim > 0 (as read; q itself is not written), else already rotated.
  const float* q = nullptr;
  int64_t q_stride = 0;
  // Output [num_tokens, num_q_heads * head_dim_v].
  float* out = nullptr;

  int num_q_heads = 0;
  int num_kv_heads = 0;  // GQA group G = num_q_heads / num_kv_heads; query head h reads KV head h / G
  int head_dim = 0;      // for Q·K
  int head_dim_v = 0;    // for V; the paged cache stores one head_dim, so paged kernels need head_dim_v == head_dim
  float scale = 0.0f;    // multiplies Q·K; 0: 1 / (q_scaling * sqrt(head_dim)) (TensorRT-LLM)
  float q_scaling = 1.0f;
  float softcap = 0.0f;  // 0: off; else score = softcap * tanh(score / softcap)
  // Band mask: query at position p sees keys in [p - pre_tokens, p + next_tokens]; -1 = unbounded.
  // Causal attention is next_tokens = 0; ORT's local_window_size W is pre_tokens = W - 1.
  int pre_tokens = -1;
  int next_tokens = 0;
  AttentionMask mask;  // optional, ANDed with the band mask

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

  // Fused append (MultiHeadCacheAttention): with k != nullptr the attention call first writes this
  // step's K/V rows into the cache, token t at slot_mapping[t] (= block * block_size + offset), K after
  // RoPE, both quantized to kv.dtype; then every query row sees them. The fused QKV buffer
  // [num_tokens, (Nq + 2 Nkv) * head_dim] is q = qkv, k = qkv + Nq * head_dim, v = k + Nkv * head_dim,
  // with all three strides (Nq + 2 Nkv) * head_dim.
  const float* k = nullptr;               // [num_tokens, k_stride], head h at k + h * head_dim; before RoPE
  int64_t k_stride = 0;
  const float* v = nullptr;               // [num_tokens, v_stride]
  int64_t v_stride = 0;
  const int64_t* slot_mapping = nullptr;  // [num_tokens]
  // RoPE fused into the kernels: rope.rotary_dim > 0 rotates q as it is read and k as it is appended,
  // token t at positions[t], exactly as kernels::apply_rope would.
  RopeParams rope;                        // rotary_dim 0: off
  const int32_t* positions = nullptr;     // [num_tokens]

  INFLIGHT_HD int num_tokens() const { return q_start[num_seqs]; }
  INFLIGHT_HD float effective_scale() const { return scale != 0.0f ? scale : 1.0f / (q_scaling * std::sqrt(float(head_dim))); }
  // The sequence whose block table holds position `pos` as seen by sequence `seq`.
  INFLIGHT_HD int kv_seq(int seq, int64_t pos) const {
    return cache_indir ? beam_row0[seq] + cache_indir[int64_t(seq) * cache_indir_stride + pos] : seq;
  }
  INFLIGHT_HD bool rope_on() const { return rope.rotary_dim > 0 && positions != nullptr; }
};

// Writes the K/V rows of this step into the cache: token t goes to slot slot_mapping[t]
// (= block * block_size + offset). k: [num_tokens, k_stride] with head h at k + h * head_dim; v likewise.
// Values are stored as kv.dtype (kv_quantize_row); no RoPE.
void append_kv(const PagedKvView& kv, const float* k, int64_t k_stride, const float* v, int64_t v_stride,
               const int64_t* slot_mapping, int64_t num_tokens);

// Upper bounds of |x| over the values p's fused append would store this step: amax[0] over K after
// any rotation at any position, amax[1] over V. For per-tensor scale calibration from a first step.
void kv_append_amax(const AttentionParams& p, float amax[2]);

namespace reference {
// Plain, obviously-correct attention: the fused append (apply_rope on a copy of K, append_kv), then for
// each query row (apply_rope on a copy of Q) scores over every visible cached key, softmax, weighted
// sum of V. The oracle for every other backend; itself checked against gqa_attention (gqa_reference.h).
void attention(const AttentionParams& p);
}  // namespace reference

namespace cpu {
// The fast CPU backend (kernels/cpu/attention_*.cpp): the fused append with RoPE, then the flash-style
// context kernel for sequences with q_len > 1 and the generation kernel for q_len == 1, on the compute
// pool, SIMD chosen by cpu::active_isa(). A row's result does not depend on which kernel, which
// batch or which split-K plan computed it (see kernels/cpu/attention_tile.h).
void attention(const AttentionParams& p);
// The parts, for tests and benchmarks: the fused append alone; the context kernel over every
// sequence of [seq_begin, seq_end); the generation kernel over [seq_begin, seq_end) (q_len must be 1).
void append_kv(const AttentionParams& p);
void context_attention(const AttentionParams& p, int seq_begin, int seq_end);
void decode_attention(const AttentionParams& p, int seq_begin, int seq_end);
}  // namespace cpu

}  // namespace inflight::kernels

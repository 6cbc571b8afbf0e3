// ONNX Runtime's com.microsoft.GroupQueryAttention (CPU EP, 1.30 semantics), computed as the decomposed
// graph of seed 000 (WebNN's GQA decomposition), op by op on dense tensors:
//
//   rotary(Q, K) -> Reshape/Transpose Q to BNSH -> ScatterND new K/V into present (BNSH) at rows
//   past_len_b + s -> Expand(G) -> Transpose K -> MatMul -> * scale -> softcap -> + mask (0 or the float32
//   minimum, built from seqlens_k, causality and the local window) [+ attention_bias] -> Softmax ->
//   MatMul with expanded V -> Transpose/Reshape to (B, S, N*H)
//
// It is the oracle of the GQA golden tests (tests/data/golden/gqa, whose README states these semantics)
// and of reference::attention. Plain loops over small tensors; not meant to be fast.
#pragma once
#include <cstdint>

namespace inflight::kernels::reference {

struct GqaParams {
  // Attributes.
  int num_heads = 0;                // N
  int kv_num_heads = 0;             // Nkv; G = N / Nkv
  float scale = 0.0f;               // 0: 1 / sqrt(H)
  float softcap = 0.0f;             // 0: off
  int local_window_size = -1;       // W > 0: a query sees its own key and the W - 1 before it
  bool do_rotary = false;
  bool rotary_interleaved = false;  // 1: GPT-J pairs (2i, 2i+1); 0: rotate-half (GPT-NeoX)
  // Dimensions.
  int batch = 0;                    // B
  int seq_len = 0;                  // S, new tokens per sequence (padded)
  int head_size = 0;                // H
  int past_buffer_len = 0;          // P, rows of past_key / past_value (0: no past)
  int total_sequence_length = 0;    // T = max_b (seqlens_k[b] + 1)
  int rotary_half = 0;              // cos_cache.shape[1] = rotary_dim / 2
  // Inputs.
  const float* query = nullptr;         // [B, S, N*H], or packed [B, S, (N + 2 Nkv) * H] when key is nullptr
  const float* key = nullptr;           // [B, S, Nkv*H] before rotary, or nullptr (packed QKV)
  const float* value = nullptr;         // [B, S, Nkv*H]
  const float* past_key = nullptr;      // [B, Nkv, P, H] (already rotated), or nullptr
  const float* past_value = nullptr;    // [B, Nkv, P, H]
  const int32_t* seqlens_k = nullptr;   // [B] total valid length - 1
  const float* cos_cache = nullptr;     // [max_pos, rotary_half]
  const float* sin_cache = nullptr;     // [max_pos, rotary_half]
  const float* attention_bias = nullptr;  // [B or 1, N or 1, S, T], or nullptr
  bool bias_per_batch = false;          // attention_bias has B (not 1) in dim 0
  bool bias_per_head = false;           // attention_bias has N (not 1) in dim 1
  // Outputs.
  float* output = nullptr;              // [B, S, N*H]
  float* present_key = nullptr;         // [B, Nkv, present_len(), H]
  float* present_value = nullptr;       // [B, Nkv, present_len(), H]

  int present_len() const { return total_sequence_length > past_buffer_len ? total_sequence_length : past_buffer_len; }
};

void gqa_attention(const GqaParams& p);

}  // namespace inflight::kernels::reference

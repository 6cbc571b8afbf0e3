// ModelConfig: the shape of a Llama-family decoder, whichever file it came from.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/attention_params.h"
#include "kernels/ops.h"

namespace inflight::engine {

struct ModelConfig {
  std::string name;              // for logs and /v1/models
  std::string architecture;      // "llama" (Llama 1/2/3, TinyLlama), "mistral", "qwen2", "qwen3"
  int dim = 0;                   // hidden size
  int num_layers = 0;
  int num_q_heads = 0;
  int num_kv_heads = 0;          // GQA: num_q_heads % num_kv_heads == 0
  int head_dim = 0;              // usually dim / num_q_heads; Qwen 3 sets its own
  int ffn_dim = 0;               // SwiGLU hidden size
  int vocab_size = 0;
  int max_seq_len = 0;           // trained context length
  float rms_eps = 1e-5f;
  float rope_theta = 10000.0f;
  int rotary_dim = 0;            // features of each head that rotate (partial rotary); == head_dim for Llama
  kernels::RopeStyle rope_style = kernels::RopeStyle::GptJ;  // GGUF llama: GptJ (adjacent pairs); HF, GGUF qwen*: NeoX
  // RoPE scaling (kernels::RopeParams): type, factor, Yarn's original context / betas / attn_factor.
  kernels::RopeScaling rope_scaling = kernels::RopeScaling::None;
  float rope_factor = 1.0f;
  int rope_original_context = 0;
  float rope_beta_fast = 32.0f, rope_beta_slow = 1.0f;
  float rope_attn_factor = 1.0f;
  std::vector<float> rope_freq_factors;  // [rotary_dim / 2] Llama 3 divisors of each pair's frequency; empty: none
  int sliding_window = 0;        // > 0: a query sees only the last `sliding_window` keys (itself included)
  bool qkv_bias = false;         // q/k/v projections add a bias (Qwen 2)
  bool qk_norm = false;          // per-head RMSNorm of q and k before RoPE (Qwen 3)
  bool tied_embeddings = false;  // output projection shares the token embedding
  int bos_id = 1;
  int eos_id = 2;

  // Points into rope_freq_factors: valid while this config lives and is not modified.
  kernels::RopeParams rope() const {
    kernels::RopeParams r{rope_style, head_dim, rotary_dim, rope_theta};
    r.scaling = rope_scaling;
    r.factor = rope_factor;
    r.original_context = rope_original_context;
    r.beta_fast = rope_beta_fast;
    r.beta_slow = rope_beta_slow;
    r.attn_factor = rope_attn_factor;
    r.freq_factors = rope_freq_factors.empty() ? nullptr : rope_freq_factors.data();
    return r;
  }

  // The model's attention as the kernels take it: heads, head dims, scale, RoPE (rope()) and Mistral's band
  // (keys in [p - (window - 1), p]). The caller sets the step's buffers and batch metadata.
  kernels::AttentionParams attention_params() const {
    kernels::AttentionParams p;
    p.num_q_heads = num_q_heads;
    p.num_kv_heads = num_kv_heads;
    p.head_dim = head_dim;
    p.head_dim_v = head_dim;
    p.scale = 1.0f / std::sqrt(float(head_dim));
    p.rope = rope();
    if (sliding_window > 0) p.pre_tokens = sliding_window - 1;
    return p;
  }
  int q_dim() const { return num_q_heads * head_dim; }
  int kv_dim() const { return num_kv_heads * head_dim; }
};

// Throws LoadError(where, ...) when a field is out of range or inconsistent.
void validate(const ModelConfig& c, const std::string& where);

}  // namespace inflight::engine

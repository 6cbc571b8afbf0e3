// ModelConfig: the shape of a Llama-family decoder, whichever file it came from.
#pragma once
#include <cstdint>
#include <string>

#include "kernels/ops.h"

namespace inflight::engine {

struct ModelConfig {
  std::string name;              // for logs and /v1/models
  std::string architecture;      // "llama" (Llama 1/2/3, Mistral, TinyLlama, Qwen2-style GQA)
  int dim = 0;                   // hidden size
  int num_layers = 0;
  int num_q_heads = 0;
  int num_kv_heads = 0;          // GQA: num_q_heads % num_kv_heads == 0
  int head_dim = 0;              // usually dim / num_q_heads
  int ffn_dim = 0;               // SwiGLU hidden size
  int vocab_size = 0;
  int max_seq_len = 0;           // trained context length
  float rms_eps = 1e-5f;
  float rope_theta = 10000.0f;
  int rotary_dim = 0;            // features of each head that rotate (partial rotary); == head_dim for Llama
  kernels::RopeStyle rope_style = kernels::RopeStyle::GptJ;  // GGUF: GptJ (adjacent pairs); HF: NeoX
  bool tied_embeddings = false;  // output projection shares the token embedding
  int bos_id = 1;
  int eos_id = 2;

  kernels::RopeParams rope() const { return {rope_style, head_dim, rotary_dim, rope_theta}; }
  int q_dim() const { return num_q_heads * head_dim; }
  int kv_dim() const { return num_kv_heads * head_dim; }
};

// Throws LoadError(where, ...) when a field is out of range or inconsistent.
void validate(const ModelConfig& c, const std::string& where);

}  // namespace inflight::engine

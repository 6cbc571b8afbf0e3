#include "engine/model_config.h"

#include <cmath>

#include "engine/load_error.h"

namespace inflight::engine {

namespace {

// Sizes beyond this are corrupt metadata, not models; keeps products like q_dim() inside int.
constexpr int64_t kMaxSize = int64_t(1) << 24;

}  // namespace

void validate(const ModelConfig& c, const std::string& where) {
  auto check_size = [&](const char* field, int64_t v) {
    if (v <= 0 || v > kMaxSize)
      throw_load_error(where, std::string("config: ") + field + " = " + std::to_string(v) + " is out of range [1, " +
                                  std::to_string(kMaxSize) + "]");
  };
  check_size("dim", c.dim);
  check_size("num_layers", c.num_layers);
  check_size("num_q_heads", c.num_q_heads);
  check_size("num_kv_heads", c.num_kv_heads);
  check_size("head_dim", c.head_dim);
  check_size("ffn_dim", c.ffn_dim);
  check_size("vocab_size", c.vocab_size);
  check_size("max_seq_len", c.max_seq_len);
  check_size("q_dim (num_q_heads * head_dim)", int64_t(c.num_q_heads) * c.head_dim);
  check_size("kv_dim (num_kv_heads * head_dim)", int64_t(c.num_kv_heads) * c.head_dim);
  if (c.num_kv_heads > c.num_q_heads || c.num_q_heads % c.num_kv_heads != 0)
    throw_load_error(where, "config: num_q_heads = " + std::to_string(c.num_q_heads) +
                                " is not a multiple of num_kv_heads = " + std::to_string(c.num_kv_heads));
  if (c.rotary_dim <= 0 || c.rotary_dim > c.head_dim || c.rotary_dim % 2 != 0)
    throw_load_error(where, "config: rotary_dim = " + std::to_string(c.rotary_dim) +
                                " must be even and in [2, head_dim = " + std::to_string(c.head_dim) + "]");
  if (!(c.rms_eps > 0.0f) || !std::isfinite(c.rms_eps))
    throw_load_error(where, "config: rms_eps = " + std::to_string(c.rms_eps) + " must be positive");
  if (!(c.rope_theta > 0.0f) || !std::isfinite(c.rope_theta))
    throw_load_error(where, "config: rope_theta = " + std::to_string(c.rope_theta) + " must be positive");
  if (c.rope_scaling != kernels::RopeScaling::None && (!(c.rope_factor >= 1.0f) || !std::isfinite(c.rope_factor)))
    throw_load_error(where, "config: rope scaling factor = " + std::to_string(c.rope_factor) + " must be >= 1");
  if (c.rope_scaling == kernels::RopeScaling::Yarn &&
      (c.rope_original_context <= 0 || !(c.rope_beta_fast > 0.0f) || !(c.rope_beta_slow > 0.0f)))
    throw_load_error(where, "config: yarn rope scaling needs a positive original context length and betas");
  if (!(c.rope_attn_factor > 0.0f) || !std::isfinite(c.rope_attn_factor))
    throw_load_error(where, "config: rope attention factor = " + std::to_string(c.rope_attn_factor) + " must be positive");
  if (!c.rope_freq_factors.empty()) {
    if (int(c.rope_freq_factors.size()) != c.rotary_dim / 2)
      throw_load_error(where, "config: " + std::to_string(c.rope_freq_factors.size()) +
                                  " rope frequency factors for rotary_dim / 2 = " + std::to_string(c.rotary_dim / 2));
    for (float f : c.rope_freq_factors)
      if (!(f > 0.0f) || !std::isfinite(f))
        throw_load_error(where, "config: a rope frequency factor is " + std::to_string(f) + " (must be positive)");
  }
  if (c.sliding_window < 0)
    throw_load_error(where, "config: sliding_window = " + std::to_string(c.sliding_window) + " is negative");
  if (c.bos_id < -1 || c.bos_id >= c.vocab_size)
    throw_load_error(where, "config: bos_id = " + std::to_string(c.bos_id) + " is outside the vocabulary");
  if (c.eos_id < -1 || c.eos_id >= c.vocab_size)
    throw_load_error(where, "config: eos_id = " + std::to_string(c.eos_id) + " is outside the vocabulary");
}

}  // namespace inflight::engine

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
  if (c.bos_id < -1 || c.bos_id >= c.vocab_size)
    throw_load_error(where, "config: bos_id = " + std::to_string(c.bos_id) + " is outside the vocabulary");
  if (c.eos_id < -1 || c.eos_id >= c.vocab_size)
    throw_load_error(where, "config: eos_id = " + std::to_string(c.eos_id) + " is outside the vocabulary");
}

}  // namespace inflight::engine

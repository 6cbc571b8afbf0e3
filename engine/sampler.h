// Sampling: greedy, temperature, top-k, top-p, min-p, repetition / presence / frequency penalties,
// with a seeded per-request generator (same seed, same output).
#pragma once
#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <vector>

namespace inflight::engine {

struct SamplingParams {
  float temperature = 1.0f;        // 0: greedy (first maximal index)
  int top_k = 0;                   // 0 or -1: off
  float top_p = 1.0f;              // (0, 1]
  float min_p = 0.0f;              // [0, 1]: drop tokens with p < min_p * p_max
  float repetition_penalty = 1.0f; // > 0; on tokens of prompt and output (HF / vLLM semantics)
  float presence_penalty = 0.0f;   // [-2, 2]; on output tokens (OpenAI semantics)
  float frequency_penalty = 0.0f;  // [-2, 2]; on output tokens, times their count
  std::optional<uint64_t> seed;    // unset: random
};

// Returns an error message for the first out-of-range field, or an empty string.
std::string validate(const SamplingParams& p);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // Picks the next token from `logits` ([vocab]; penalties apply to a copy, so a row may serve several samplers).
  int32_t sample(std::span<const float> logits, std::span<const int32_t> prompt_ids,
                 std::span<const int32_t> output_ids);

  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<int32_t> counts_;            // [vocab] scratch: occurrences in the output
  std::vector<float> penalized_;           // [vocab] scratch: the logits with the penalties applied
  struct Candidate {
    float logit;  // divided by the temperature
    float p;      // e^(logit - the largest): the weight before normalising
    int32_t id;
  };
  std::vector<Candidate> candidates_;  // scratch
};

// Whether `p` sets a penalty: the logits apply_penalties() would change.
inline bool has_penalties(const SamplingParams& p) {
  return p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
}

// Applies the penalties of `p` to logits in place (exposed for tests).
void apply_penalties(const SamplingParams& p, std::span<float> logits, std::span<const int32_t> prompt_ids,
                     std::span<const int32_t> output_ids, std::vector<int32_t>& counts_scratch);

}  // namespace inflight::engine

// The cost of one engine step, for the step-time budget (Sarathi-Serve's stall-free batching): a linear
// model of a step's time in its prompt tokens, its decoding sequences and the query-key pairs its
// attention reads, learned online from measured step times by a robust (Huber) least-squares fit.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace inflight::engine {

struct ScheduledBatch;

// What a step's time depends on.
struct StepShape {
  int num_prefill_tokens = 0;   // tokens of context-phase sequences (prompt chunks, recomputation)
  int num_decode_seqs = 0;      // generation-phase sequences, one token each
  double attention_kpairs = 0;  // query-key pairs attended, in thousands: sum of n * (past + (n + 1) / 2)
};

// The query-key pairs (thousands) of `num_tokens` new tokens after `past` cached ones (causal).
inline double attention_kpairs(int64_t past, int64_t num_tokens) {
  return double(num_tokens) * (double(past) + double(num_tokens + 1) / 2) / 1000.0;
}

// The shape of a packed batch: its context sequences are prefill, the rest decode.
StepShape step_shape(const ScheduledBatch& batch);

// Milliseconds per unit of each feature. All >= 0.
struct StepCost {
  double fixed_ms = 0;            // per step: weights streamed once, thread wake-ups, emit
  double prefill_token_ms = 0;    // per prompt token: its share of every matrix product
  double decode_seq_ms = 0;       // per decoding sequence: its token, its logits row (LM head), sampling
  double attention_kpair_ms = 0;  // per thousand query-key pairs

  double predict_ms(const StepShape& s) const {
    return fixed_ms + prefill_token_ms * s.num_prefill_tokens + decode_seq_ms * s.num_decode_seqs +
           attention_kpair_ms * s.attention_kpairs;
  }
  // The cost of `n` more prompt tokens after `past` cached ones (no fixed part).
  double prefill_ms(int64_t past, int64_t n) const {
    return prefill_token_ms * double(n) + attention_kpair_ms * attention_kpairs(past, n);
  }
  bool known() const { return fixed_ms > 0 || prefill_token_ms > 0 || decode_seq_ms > 0 || attention_kpair_ms > 0; }
};

// "fixed,prefill_token,decode_seq,attention_kpair" in ms (the INFLIGHT_DEBUG_STEP_COST test hook). Throws
// std::invalid_argument naming the problem.
StepCost parse_step_cost(const std::string& text);

// Learns StepCost from (shape, measured ms) pairs. Steps with and without prompt tokens are kept in two
// windows of the most recent `window` each, so a long run of decode-only steps does not forget what a
// prompt token costs. observe() refits after each of the first `window` steps, after the first step of either
// kind, and after every kRefitEvery-th step from then on (a fit takes tens of microseconds: a few percent of
// a small model's decode step). The fit: iteratively reweighted least squares with Huber weights
// (outliers such as a step preempted by another process count little), a small ridge term, and
// non-negative coefficients. Until a step with prompt tokens is seen, a prompt token is assumed to cost
// what a decoding sequence does (both are one row of every matrix product), and the reverse.
class StepCostModel {
 public:
  explicit StepCostModel(int window = 64);

  void observe(const StepShape& shape, double ms);
  const StepCost& cost() const { return cost_; }
  int64_t num_observed() const { return num_observed_; }

 private:
  static constexpr int kNumFeatures = 4;  // 1, prefill tokens, decode seqs, attention kpairs
  static constexpr int64_t kRefitEvery = 8;
  struct Sample {
    std::array<double, kNumFeatures> x;
    double ms = 0;
  };
  void refit();

  int window_;
  std::vector<Sample> with_prefill_, decode_only_;  // rings of at most window_ samples
  size_t next_with_prefill_ = 0, next_decode_only_ = 0;
  int64_t num_observed_ = 0;
  StepCost cost_;
};

}  // namespace inflight::engine

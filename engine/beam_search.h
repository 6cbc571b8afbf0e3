// Beam search selection (Hugging Face / vLLM semantics): each step keeps the `width` best
// continuations of all live beams by cumulative log-probability; a continuation that ends the
// sequence (an end token, or text that reaches a stop string) becomes a finished hypothesis scored by
// cumulative_logprob / length^length_penalty (length counts prompt + generated tokens, the end token
// excluded; a stop string's last token counts).
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace inflight::engine {

struct BeamParams {
  int width = 1;
  float length_penalty = 1.0f;
  bool early_stopping = false;  // stop once `width` hypotheses are finished
  int num_prompt = 0;
  int max_tokens = 16;
  int min_tokens = 0;
  std::vector<int32_t> end_ids;  // EOS (unless ignored) and stop token ids
  // Optional: whether the text of these generated tokens holds a stop string (a beam that reaches one
  // ends there, as a sampled sequence does).
  std::function<bool(const std::vector<int32_t>& generated)> ends_text;
};

struct BeamCandidate {
  int parent = 0;  // index of the live beam it extends
  int32_t token = 0;
  double cumulative_logprob = 0.0;
};

// How a hypothesis ended: by the length limit (or the search ending), an end token, or a stop string.
enum class BeamEnd { Length, Token, Text };

struct BeamHypothesis {
  std::vector<int32_t> tokens;  // generated tokens, the end token included when it ended the beam
  double cumulative_logprob = 0.0;
  double score = 0.0;
  BeamEnd end = BeamEnd::Length;
};

class BeamSearch {
 public:
  explicit BeamSearch(BeamParams params) : p_(std::move(params)) {}

  // One step. logprobs: [num_live, vocab] log-softmax of each live beam; cumulative: [num_live];
  // generated: the live beams' generated tokens so far (all the same length). Returns the next
  // `width` beams, or fewer / none when the search is done.
  std::vector<BeamCandidate> step(std::span<const float> logprobs, int vocab, std::span<const double> cumulative,
                                  const std::vector<const std::vector<int32_t>*>& generated);
  bool done() const { return done_; }
  // The `n` best hypotheses; live beams count as hypotheses when the search ends without them.
  std::vector<BeamHypothesis> best(int n) const;

  double score(double cumulative_logprob, int num_generated_without_end) const;
  const BeamParams& params() const { return p_; }

 private:
  bool is_end(int32_t token, int num_generated_after) const;
  void add_hypothesis(BeamHypothesis h);

  BeamParams p_;
  std::vector<BeamHypothesis> finished_;  // at most `width`, best first
  std::vector<BeamHypothesis> live_;      // the live beams when the search stopped
  bool done_ = false;
};

}  // namespace inflight::engine

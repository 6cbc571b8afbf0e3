#include "engine/beam_search.h"

#include <algorithm>
#include <cmath>

namespace inflight::engine {

double BeamSearch::score(double cumulative_logprob, int num_generated_without_end) const {
  const double length = double(p_.num_prompt + num_generated_without_end);
  return cumulative_logprob / std::pow(length, double(p_.length_penalty));
}

bool BeamSearch::is_end(int32_t token, int num_generated_after) const {
  return num_generated_after >= p_.min_tokens && std::find(p_.end_ids.begin(), p_.end_ids.end(), token) != p_.end_ids.end();
}

void BeamSearch::add_hypothesis(BeamHypothesis h) {
  finished_.push_back(std::move(h));
  std::stable_sort(finished_.begin(), finished_.end(),
                   [](const BeamHypothesis& a, const BeamHypothesis& b) { return a.score > b.score; });
  if (int(finished_.size()) > p_.width) finished_.resize(size_t(p_.width));
}

std::vector<BeamCandidate> BeamSearch::step(std::span<const float> logprobs, int vocab,
                                            std::span<const double> cumulative,
                                            const std::vector<const std::vector<int32_t>*>& generated) {
  const int num_live = int(cumulative.size());
  const int num_gen = generated.empty() ? 0 : int(generated[0]->size());
  // The 2 * width best (beam, token) continuations, ties broken by beam then token.
  struct Cand {
    double cum;
    int parent;
    int32_t token;
  };
  std::vector<Cand> all;
  all.reserve(size_t(num_live) * size_t(vocab));
  for (int b = 0; b < num_live; ++b)
    for (int32_t t = 0; t < vocab; ++t)
      all.push_back({cumulative[size_t(b)] + double(logprobs[size_t(b) * vocab + t]), b, t});
  const size_t k = std::min(all.size(), size_t(2 * p_.width));
  auto better = [](const Cand& a, const Cand& b) {
    if (a.cum != b.cum) return a.cum > b.cum;
    if (a.parent != b.parent) return a.parent < b.parent;
    return a.token < b.token;
  };
  std::partial_sort(all.begin(), all.begin() + int64_t(k), all.end(), better);

  std::vector<BeamCandidate> next;
  for (size_t rank = 0; rank < k && int(next.size()) < p_.width; ++rank) {
    const Cand& c = all[rank];
    const bool end_token = is_end(c.token, num_gen + 1);
    bool end_text = false;
    std::vector<int32_t> tokens;
    if (!end_token && p_.ends_text) {
      tokens = *generated[size_t(c.parent)];
      tokens.push_back(c.token);
      end_text = p_.ends_text(tokens);
    }
    if (end_token || end_text) {
      if (int(rank) >= p_.width) continue;  // only the top `width` may end a hypothesis
      BeamHypothesis h;
      h.tokens = end_text ? std::move(tokens) : *generated[size_t(c.parent)];
      if (end_token) h.tokens.push_back(c.token);
      h.cumulative_logprob = c.cum;
      h.score = score(c.cum, end_token ? num_gen : num_gen + 1);
      h.end = end_token ? BeamEnd::Token : BeamEnd::Text;
      add_hypothesis(std::move(h));
    } else {
      next.push_back({c.parent, c.token, c.cum});
    }
  }

  const bool full = int(finished_.size()) >= p_.width;
  if (num_gen + 1 >= p_.max_tokens) {
    done_ = true;
  } else if (full && p_.early_stopping) {
    done_ = true;
  } else if (full && !next.empty()) {
    // No live beam can still beat the worst finished hypothesis (at the current length).
    const double best_live = score(next[0].cumulative_logprob, num_gen + 1);
    if (finished_.back().score >= best_live) done_ = true;
  }
  if (next.empty()) done_ = true;
  if (done_) {
    for (const BeamCandidate& c : next) {
      BeamHypothesis h;
      h.tokens = *generated[size_t(c.parent)];
      h.tokens.push_back(c.token);
      h.cumulative_logprob = c.cumulative_logprob;
      h.score = score(c.cumulative_logprob, num_gen + 1);
      live_.push_back(std::move(h));
    }
    next.clear();
  }
  return next;
}

std::vector<BeamHypothesis> BeamSearch::best(int n) const {
  std::vector<BeamHypothesis> all = finished_;
  all.insert(all.end(), live_.begin(), live_.end());
  std::stable_sort(all.begin(), all.end(), [](const BeamHypothesis& a, const BeamHypothesis& b) { return a.score > b.score; });
  if (int(all.size()) > n) all.resize(size_t(n));
  return all;
}

}  // namespace inflight::engine

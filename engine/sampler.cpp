#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/ops.h"

namespace inflight::engine {

std::string validate(const SamplingParams& p) {
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) return "temperature must be >= 0";
  if (p.top_k < -1) return "top_k must be -1, 0 (off) or a positive count";
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return "top_p must be in (0, 1]";
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return "min_p must be in [0, 1]";
  if (!(p.repetition_penalty > 0.0f) || !std::isfinite(p.repetition_penalty)) return "repetition_penalty must be > 0";
  if (!(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f)) return "presence_penalty must be in [-2, 2]";
  if (!(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f)) return "frequency_penalty must be in [-2, 2]";
  return {};
}

void apply_penalties(const SamplingParams& p, std::span<float> logits, std::span<const int32_t> prompt_ids,
                     std::span<const int32_t> output_ids, std::vector<int32_t>& counts) {
  const int64_t vocab = int64_t(logits.size());
  if (p.repetition_penalty != 1.0f) {
    // Each distinct token of prompt + output once: positive logits shrink, negative ones grow.
    counts.assign(size_t(vocab), 0);
    auto mark = [&](int32_t id) {
      if (id < 0 || id >= vocab || counts[size_t(id)]) return;
      counts[size_t(id)] = 1;
      float& l = logits[size_t(id)];
      l = l > 0.0f ? l / p.repetition_penalty : l * p.repetition_penalty;
    };
    for (int32_t id : prompt_ids) mark(id);
    for (int32_t id : output_ids) mark(id);
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    counts.assign(size_t(vocab), 0);
    for (int32_t id : output_ids)
      if (id >= 0 && id < vocab) ++counts[size_t(id)];
    for (int32_t id : output_ids) {
      if (id < 0 || id >= vocab || counts[size_t(id)] == 0) continue;
      logits[size_t(id)] -= p.frequency_penalty * float(counts[size_t(id)]) + p.presence_penalty;
      counts[size_t(id)] = 0;  // penalise each distinct token once
    }
  }
}

Sampler::Sampler(const SamplingParams& params) : params_(params) {
  if (params.seed) {
    rng_.seed(*params.seed);
  } else {
    std::random_device rd;
    rng_.seed((uint64_t(rd()) << 32) ^ rd());
  }
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> prompt_ids,
                        std::span<const int32_t> output_ids) {
  if (has_penalties(params_)) {
    penalized_.assign(logits.begin(), logits.end());
    apply_penalties(params_, penalized_, prompt_ids, output_ids, counts_);
    logits = penalized_;
  }
  const int32_t vocab = int32_t(logits.size());
  if (params_.temperature == 0.0f) {
    return int32_t(kernels::argmax(logits.data(), vocab));  // first maximal index
  }

  // Candidates sorted by (logit desc, id asc): deterministic under ties.
  candidates_.resize(size_t(vocab));
  for (int32_t i = 0; i < vocab; ++i) candidates_[size_t(i)] = {logits[size_t(i)] / params_.temperature, i};
  auto before = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  size_t keep = size_t(vocab);
  if (params_.top_k > 0 && size_t(params_.top_k) < keep) {
    keep = size_t(params_.top_k);
    std::partial_sort(candidates_.begin(), candidates_.begin() + keep, candidates_.end(), before);
  } else {
    std::sort(candidates_.begin(), candidates_.end(), before);
  }
  candidates_.resize(keep);

  // Probabilities of the kept candidates (max first, so exp never overflows).
  const float max_logit = candidates_[0].first;
  double total = 0.0;
  for (auto& c : candidates_) {
    c.first = std::exp(c.first - max_logit);
    total += c.first;
  }
  if (params_.top_p < 1.0f) {
    double cum = 0.0;
    size_t n = 0;
    while (n < keep) {
      cum += candidates_[n].first / total;
      ++n;
      if (cum >= params_.top_p) break;
    }
    keep = n;
  }
  if (params_.min_p > 0.0f) {
    const float threshold = params_.min_p * candidates_[0].first;  // relative to p_max (= exp(0))
    size_t n = 1;
    while (n < keep && candidates_[n].first >= threshold) ++n;
    keep = n;
  }
  double kept_total = 0.0;
  for (size_t i = 0; i < keep; ++i) kept_total += candidates_[i].first;
  const double u = std::uniform_real_distribution<double>(0.0, kept_total)(rng_);
  double cum = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    cum += candidates_[i].first;
    if (u < cum) return candidates_[i].second;
  }
  return candidates_[keep - 1].second;
}

}  // namespace inflight::engine

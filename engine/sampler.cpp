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

  // The filters keep a prefix of the candidates in the order (logit desc, id asc): the top_k first, then
  // those whose weights sum to top_p of the total, and of those the ones with p >= min_p p_max. Only what a
  // filter needs is ordered: top_k selects, min_p is a threshold, and top_p sorts from the top down only as
  // far as its sum reaches. With none set, nothing is sorted and the draw walks the vocabulary in id order
  // (a full sort of 49,152 candidates cost about 4 ms a token).
  auto before = [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };
  candidates_.resize(size_t(vocab));
  for (int32_t i = 0; i < vocab; ++i) candidates_[size_t(i)] = {logits[size_t(i)] / params_.temperature, 0.0f, i};
  auto first = candidates_.begin(), last = candidates_.end();
  if (params_.top_k > 0 && params_.top_k < vocab) {  // a heap of k for a few (most candidates fail its top
    last = first + params_.top_k;                     // at one comparison), else a linear-time selection
    if (params_.top_k <= 1024) std::partial_sort(first, last, candidates_.end(), before);
    else std::nth_element(first, last - 1, candidates_.end(), before);
  }
  std::iter_swap(first, std::min_element(first, last, before));  // the first candidate in order leads
  const float max_logit = first->logit;
  const bool top_p = params_.top_p < 1.0f;
  double total = 0.0;  // of the candidates the top_k left, for top_p
  for (auto c = first; c != last; ++c) {
    c->p = std::exp(c->logit - max_logit);  // 1 for the largest, so min_p's threshold is min_p
    if (top_p) total += c->p;
  }
  if (params_.min_p > 0.0f) {  // a prefix in candidate order (the weights fall as the logits do), the lead kept
    const float threshold = params_.min_p;
    last = std::partition(first + 1, last, [threshold](const Candidate& c) { return c.p >= threshold; });
  }
  if (top_p) {  // sorted from the top down, in growing steps, until the sum reaches top_p
    const std::ptrdiff_t n = last - first;
    std::ptrdiff_t keep = n;
    double cum = 0.0;
    for (std::ptrdiff_t sorted = 0; keep == n && sorted < n;) {
      const std::ptrdiff_t upto = std::min<std::ptrdiff_t>(n, std::max<std::ptrdiff_t>(64, 8 * sorted));
      std::partial_sort(first + sorted, first + upto, last, before);
      for (std::ptrdiff_t i = sorted; i < upto; ++i) {
        cum += first[i].p / total;
        if (cum >= params_.top_p) {
          keep = i + 1;
          break;
        }
      }
      sorted = upto;
    }
    last = first + keep;
  }
  double kept_total = 0.0;
  for (auto c = first; c != last; ++c) kept_total += c->p;
  const double u = std::uniform_real_distribution<double>(0.0, kept_total)(rng_);
  double cum = 0.0;
  for (auto c = first; c != last; ++c) {
    cum += c->p;
    if (u < cum) return c->id;
  }
  return (last - 1)->id;
}

}  // namespace inflight::engine

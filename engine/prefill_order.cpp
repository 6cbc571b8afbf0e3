#include "engine/prefill_order.h"

#include <algorithm>
#include <numeric>

namespace inflight::engine {

const char* prefill_order_name(PrefillOrder order) {
  return order == PrefillOrder::kShortFirst ? "short-first" : "fcfs";
}

bool parse_prefill_order(std::string_view name, PrefillOrder* order) {
  for (PrefillOrder o : {PrefillOrder::kFcfs, PrefillOrder::kShortFirst})
    if (name == prefill_order_name(o)) {
      *order = o;
      return true;
    }
  return false;
}

std::string prefill_order_names() { return "fcfs, short-first"; }

int largest_chunk_within(const StepCost& cost, int64_t past, int token_cap, double ms) {
  int lo = 0, hi = std::max(token_cap, 0);
  while (lo < hi) {
    const int mid = lo + (hi - lo + 1) / 2;
    if (cost.prefill_ms(past, mid) <= ms) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

PrefillPlan plan_short_first(std::span<const PrefillCandidate> cands, const PrefillBudget& b, const StepCost& cost) {
  PrefillPlan plan;
  plan.num_tokens.assign(cands.size(), 0);
  if (cands.empty()) return plan;

  // The oldest candidate's minimum chunk (tokens, ms, its sequence slot and admission) is set aside
  // until it is served, so shorter prompts never take it.
  const PrefillCandidate& head = cands[0];
  const bool head_servable = b.num_seqs > 0 && (!head.waiting || b.num_admissions > 0);
  const int reserve_tokens = head_servable ? std::min({b.min_chunk, head.num_uncomputed, b.num_tokens}) : 0;
  const double reserve_ms = b.timed ? cost.prefill_ms(head.num_computed, reserve_tokens) : 0;
  bool head_pending = reserve_tokens > 0;
  bool shortest_pending = true;  // the first other candidate served gets the minimum chunk too

  std::vector<int> order(cands.size());  // shortest remaining first; ties oldest first
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int c) { return cands[size_t(a)].num_uncomputed < cands[size_t(c)].num_uncomputed; });

  int tokens = b.num_tokens, seqs = b.num_seqs, admissions = b.num_admissions;
  double ms = b.ms;
  size_t first_unfinished = 0;  // the oldest candidate not given its whole remaining prompt (moves forward)
  auto older_unfinished = [&](int idx) {
    while (first_unfinished < cands.size() &&
           plan.num_tokens[first_unfinished] == cands[first_unfinished].num_uncomputed)
      ++first_unfinished;
    return first_unfinished < size_t(idx);
  };
  for (int idx : order) {
    const PrefillCandidate& c = cands[size_t(idx)];
    if (c.waiting && !c.may_pass && older_unfinished(idx)) continue;
    const bool is_head = idx == 0;
    // What this candidate may use: everything for the head, the rest less the head's share otherwise.
    const bool hold = head_pending && !is_head;
    const int seqs_free = seqs - (hold ? 1 : 0);
    const int admissions_free = admissions - (hold && head.waiting ? 1 : 0);
    const int tokens_free = tokens - (hold ? reserve_tokens : 0);
    const double ms_free = ms - (hold ? reserve_ms : 0);
    if (seqs_free <= 0 || (c.waiting && admissions_free <= 0)) continue;
    const int cap = std::min(c.num_uncomputed, tokens_free);
    if (cap <= 0) continue;
    int n = b.timed ? largest_chunk_within(cost, c.num_computed, cap, ms_free) : cap;
    if (is_head) n = std::max(n, std::min(reserve_tokens, cap));
    else if (shortest_pending) n = std::max(n, std::min(b.min_chunk, cap));
    if (n <= 0) continue;
    plan.num_tokens[size_t(idx)] = n;
    plan.order.push_back(idx);
    tokens -= n;
    seqs -= 1;
    if (c.waiting) admissions -= 1;
    if (b.timed) ms -= cost.prefill_ms(c.num_computed, n);
    if (is_head) head_pending = false;
    else shortest_pending = false;
  }
  return plan;
}

}  // namespace inflight::engine

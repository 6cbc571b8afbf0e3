// The order in which a step's prompt budget goes to the prompts being prefilled (prompt chunks and
// recomputations; decoding sequences are served before any of them).
//
// - fcfs: first come, first served. A short prompt that arrives behind a long one waits for all of the
//   long one's chunks.
// - short-first: the shortest remaining prompt first (SRPT, which minimizes the mean time to first token),
//   except that the oldest prompt in line always gets at least the minimum chunk: it is set aside before
//   any shorter prompt is served, so the oldest prompt progresses every step and every prompt, once it is
//   the oldest, finishes within ceil(remaining / minimum chunk) steps. Ties stay first come, first served.
//   The time budget and the token budget are spent in that order, each prompt taking the largest chunk
//   that fits what is left; the shortest prompt served besides the oldest also gets at least the minimum
//   chunk, so short prompts keep moving when the decoding sequences leave (almost) no time: a step then
//   exceeds the budget by at most two minimum chunks (fcfs: one). A waiting prompt whose may_pass is false is admitted only in a step that
//   completes every older prompt first, as fcfs would admit it.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/step_cost.h"

namespace inflight::engine {

enum class PrefillOrder { kFcfs, kShortFirst };

const char* prefill_order_name(PrefillOrder order);  // "fcfs", "short-first"
// False for anything but a name prefill_order_name() gives.
bool parse_prefill_order(std::string_view name, PrefillOrder* order);
std::string prefill_order_names();  // "fcfs, short-first"

// One prompt being prefilled, as the plan sees it.
struct PrefillCandidate {
  int64_t num_computed = 0;  // tokens already in the cache: the chunk's attention past
  int num_uncomputed = 0;    // prompt (or recomputation) tokens left, >= 1
  bool waiting = false;      // not admitted yet: it takes one of the step's admissions
  // Waiting only: it may be admitted while an older candidate's prompt is not all planned (the
  // scheduler's KV test).
  bool may_pass = true;
};

// What a step has left for prompt chunks once the decoding sequences are served.
struct PrefillBudget {
  int num_tokens = 0;      // prompt tokens the step may still carry
  int num_seqs = 0;        // sequences the step may still carry
  int num_admissions = 0;  // waiting sequences that may still be admitted
  bool timed = false;      // the step-time budget applies (`ms` and the cost are meaningful)
  double ms = 0;           // predicted ms left for prompt chunks (may be <= 0)
  int min_chunk = 0;       // tokens the oldest candidate gets at least, whatever `ms` says
};

struct PrefillPlan {
  std::vector<int> num_tokens;  // [candidates] tokens of each candidate this step; 0: none
  std::vector<int> order;       // candidates with tokens, in the order they were served
};

// The short-first plan over `candidates`, given oldest first (the first one is the oldest in line).
PrefillPlan plan_short_first(std::span<const PrefillCandidate> candidates, const PrefillBudget& budget,
                             const StepCost& cost);

// The largest chunk of at most `token_cap` tokens after `past` cached ones whose predicted cost is <= `ms`
// (binary search: attention makes the cost grow faster than the chunk); 0 when none fits.
int largest_chunk_within(const StepCost& cost, int64_t past, int token_cap, double ms);

}  // namespace inflight::engine

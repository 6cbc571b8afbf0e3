// Scheduler, vLLM-v1 style: every sequence has computed vs total tokens, and each step fills a token
// budget (max_num_batched_tokens) and a sequence limit (max_num_seqs), running sequences first, then
// waiting ones. There is no prefill or decode mode: chunked prefill is scheduling fewer tokens than a
// sequence lacks. When blocks run out, the newest running sequence is preempted (its blocks freed; it
// is recomputed later). The step goes out as one ScheduledBatch, context sequences first.
//
// With a step-time budget (max_step_ms > 0, Sarathi-Serve's stall-free batching), a step that carries
// decoding sequences gives them their tokens first and cuts prompt chunks so that the step's predicted
// time (a StepCost, learned by the engine or given by a test) stays under the budget; the first prompt
// in line still gets at least min_prefill_chunk tokens, so no prompt starves. Steps with no decoding
// sequence have no inter-token latency to protect and fill the token budget as before.
//
// The prefill order (prefill_order.h) decides which prompts the budget left after the decoding
// sequences goes to. fcfs: running prompts in admission order, then waiting ones in arrival order,
// stopping at the first that gets nothing. short-first: one plan over the running prompts and the oldest
// max_num_seqs waiting ones gives the shortest remaining prompts their chunks first while the oldest
// prompt keeps at least min_prefill_chunk tokens a step (and so does the shortest). Allocation and preemption do not change: the
// running sequences allocate first, oldest first, and preempt the newest when blocks run out; a waiting
// prompt never preempts. A waiting prompt admitted before an older prompt is all computed needs a KV
// pool that holds every running sequence, every older waiting one and itself up to max_tokens
// (TensorRT-LLM's guaranteed-no-evict test), so passing never causes a preemption; else it waits its turn.
#pragma once
#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "cache/kv_cache.h"
#include "engine/batch.h"
#include "engine/prefill_order.h"
#include "engine/sequence.h"
#include "engine/step_cost.h"

namespace inflight::engine {

struct SchedulerConfig {
  int max_num_seqs = 64;
  int max_num_batched_tokens = 2048;
  bool enable_prefix_caching = true;
  // Target step time in ms while sequences decode (their inter-token latency); 0: no time budget.
  double max_step_ms = 0;
  // Prompt tokens a step computes at least while a prompt waits, whatever the time budget.
  int min_prefill_chunk = 32;
  // Which prompts a step's prompt budget goes to first (prefill_order.h).
  PrefillOrder prefill_order = PrefillOrder::kFcfs;
};

struct ScheduledSeq {
  Sequence* seq = nullptr;
  int num_tokens = 0;         // tokens of this sequence computed in the step
  bool wants_logits = false;  // the step reaches its last token: a new token will be chosen
};

struct SchedulerOutput {
  ScheduledBatch batch;
  std::vector<ScheduledSeq> seqs;  // in batch order
  std::vector<int> logits_owner;   // [batch.logits_rows.size()] index into seqs
  double predicted_ms = 0;         // the step's time as the StepCost in use predicts it (0: none known)
};

struct SchedulerCounters {
  uint64_t preemptions = 0;
  uint64_t prefix_query_tokens = 0;  // prompt tokens looked up in the prefix cache
  uint64_t prefix_hit_tokens = 0;    // of those, found
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, cache::KvCache& kv);

  // Whether `num_tokens` tokens of one sequence could ever be held (admission: fits / later / never).
  bool can_ever_fit(int64_t num_tokens) const;
  // KV blocks a beam request needs at most: the prompt once, then each beam's own blocks.
  int64_t beam_blocks_needed(int num_prompt, int max_tokens, int beam_width) const;

  void add(Sequence* seq);  // a new (or restarted) sequence, at the back of the waiting queue
  // A sequence forked from `parent` this step (n > 1 or beams): runs right after its parent.
  void add_running_after(const Sequence* parent, Sequence* seq);
  void remove(Sequence* seq);  // finished or cancelled: frees its blocks

  // Fills `out` with the next step; false when nothing can run.
  bool schedule(SchedulerOutput* out);
  // Advances num_computed of every scheduled sequence and registers newly full blocks.
  void on_step_done(const SchedulerOutput& out);
  // The cost model the next schedule() plans with (the step-time budget).
  void set_step_cost(const StepCost& cost) { step_cost_ = cost; }
  const StepCost& step_cost() const { return step_cost_; }

  int num_running() const { return int(running_.size()); }
  int num_waiting() const { return int(waiting_.size()); }
  const SchedulerCounters& counters() const { return counters_; }

 private:
  // What a step may still spend on prompt chunks under the step-time budget.
  struct PrefillAllowance {
    bool limited = false;      // the budget applies: it is on, the cost is known, sequences decode
    double ms = 0;             // predicted ms left for prompt chunks
    int num_decode_left = 0;   // decoding sequences not scheduled yet: tokens held back for them
    bool any_prefill = false;  // a prompt chunk is in the step already (the minimum chunk was given)
  };
  PrefillAllowance plan_allowance() const;
  // Tokens of the prompt (or recomputation) of `seq` for this step, at most `token_cap`; 0: none fit.
  int prefill_chunk(const Sequence* seq, int token_cap, const PrefillAllowance& a) const;
  // short-first: plans this step's prompt chunks into planned_running_ and planned_admissions_.
  void plan_prefill(const PrefillAllowance& a);
  int planned_tokens(const Sequence* seq) const;  // a running sequence's planned chunk; 0: none
  // KV blocks `seq` may still take before it ends (max_tokens generated, forks included).
  int64_t blocks_to_finish(const Sequence* seq) const;

  bool allocate(Sequence* seq, int num_tokens);
  void preempt(Sequence* victim);
  // Reuses cached blocks of the sequence's longest cached prefix; returns the tokens found, or -1
  // when the sequence is not looked up (caching off, or already holding blocks).
  int match_prefix(Sequence* seq);
  void register_full_blocks(Sequence* seq);
  void build_batch(SchedulerOutput* out);

  SchedulerConfig config_;
  cache::KvCache& kv_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;  // admission order; beams of one request are consecutive
  SchedulerCounters counters_;
  StepCost step_cost_;
  // short-first, rebuilt by every schedule(): planned chunks of running prompts, and the waiting
  // sequences to admit, in order, with their chunks.
  std::vector<std::pair<const Sequence*, int>> planned_running_;
  std::vector<std::pair<Sequence*, int>> planned_admissions_;
};

}  // namespace inflight::engine

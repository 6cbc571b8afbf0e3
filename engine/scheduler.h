// Scheduler, vLLM-v1 style: every sequence has computed vs total tokens, and each step fills a token
// budget (max_num_batched_tokens) and a sequence limit (max_num_seqs), running sequences first, then
// waiting ones. There is no prefill or decode mode: chunked prefill is scheduling fewer tokens than a
// sequence lacks. When blocks run out, the newest running sequence is preempted (its blocks freed; it
// is recomputed later). The step goes out as one ScheduledBatch, context sequences first.
#pragma once
#include <cstdint>
#include <deque>
#include <vector>

#include "cache/kv_cache.h"
#include "engine/batch.h"
#include "engine/sequence.h"

namespace inflight::engine {

struct SchedulerConfig {
  int max_num_seqs = 64;
  int max_num_batched_tokens = 2048;
  bool enable_prefix_caching = true;
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

  int num_running() const { return int(running_.size()); }
  int num_waiting() const { return int(waiting_.size()); }
  const SchedulerCounters& counters() const { return counters_; }

 private:
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
};

}  // namespace inflight::engine

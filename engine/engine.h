// Engine: many requests share every forward step. submit()/cancel() are thread-safe; one engine
// thread runs schedule -> forward -> sample -> emit. Events reach each request's sink on that thread.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "cache/kv_cache.h"
#include "engine/grammar/token_vocab.h"
#include "engine/model.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/step_cost.h"
#include "engine/step_log.h"
#include "engine/tokenizer.h"

namespace inflight::engine {

struct EngineConfig {
  int max_num_seqs = 64;
  int max_num_batched_tokens = 2048;
  int max_model_len = 0;  // prompt + generated tokens per sequence; 0: the model's context length
  int max_queue = 1024;   // requests waiting to start; beyond it submit() throws QueueFullError
  bool enable_prefix_caching = true;
  // Stall-free batching: while sequences decode, prompt chunks are cut so a step's predicted time stays
  // under this many ms (the cost of a step is learned from the steps measured). 0: off.
  double max_step_ms = 0;
  // Which prompts a step's prompt budget goes to first (prefill_order.h).
  PrefillOrder prefill_order = PrefillOrder::kFcfs;
  // Called on the engine thread with the seconds a constrained token spent in its grammar (the check of the
  // sampled token, the mask where needed, the matcher's step); may be empty. Must return quickly.
  std::function<void(double)> observe_grammar_time;
  // NOTE: a test hook: the step cost the scheduler plans with, instead of the learned one.
  std::optional<StepCost> fixed_step_cost;
  int debug_step_delay_ms = 0;  // a test hook: the engine thread sleeps this long after every step
  // NOTE: a test hook: step number N (1-based) throws an EngineFault, which stops the engine thread.
  // 0: never.
  uint64_t debug_fault_at_step = 0;
};

// The waiting queue is full: try again later (HTTP 429/503 with Retry-After).
class QueueFullError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The engine thread has stopped (after an EngineFault, or shutdown()): nothing submitted will run
// (HTTP 503).
class EngineDeadError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A fault the engine cannot step past (a broken invariant inside a step): every request in flight ends
// with an ErrorEvent and the engine thread stops; alive() turns false. Other exceptions from a step fail
// only the requests in it.
class EngineFault : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

struct EngineStats {
  int num_running = 0;          // requests with a sequence scheduled or computing
  int num_waiting = 0;          // requests not yet started
  int kv_blocks_used = 0;
  int kv_blocks_peak = 0;         // most blocks held at once, since start (or reset_peak())
  int kv_blocks_total = 0;
  uint64_t num_preemptions = 0;
  uint64_t prefix_query_tokens = 0;
  uint64_t prefix_hit_tokens = 0;
  uint64_t prompt_tokens = 0;     // computed prompt tokens (cache hits excluded)
  uint64_t generated_tokens = 0;
  uint64_t num_steps = 0;
  double max_step_ms = 0;         // the step-time budget (EngineConfig); 0: off
  PrefillOrder prefill_order = PrefillOrder::kFcfs;  // (EngineConfig)
  StepCost step_cost;             // what the scheduler plans the next step with (learned or fixed)
  std::map<std::string, uint64_t> finished_by_reason;  // "stop", "length", "cancelled", "error"
};

class Engine {
 public:
  // `model`, `tokenizer` and `kv` must outlive the engine. Starts the engine thread.
  Engine(Model& model, const Tokenizer& tokenizer, cache::KvCache& kv, EngineConfig config);
  ~Engine();  // cancels whatever is left and joins the engine thread
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request and returns its id. Throws std::invalid_argument for a request that can never
  // run (naming the problem: empty prompt, token outside the vocabulary, prompt longer than the
  // context, more KV than the whole cache, bad sampling values) and QueueFullError when full.
  uint64_t submit(Request request);
  // Cancels a request; its blocks are freed within one step and it ends with FinishReason::Cancelled.
  // Unknown or finished ids are ignored.
  void cancel(uint64_t id);
  // Cancels every request and stops the engine thread (idempotent).
  void shutdown();

  EngineStats stats() const;
  void reset_peak();
  // The most recent steps, oldest first (at most kStepLogCapacity); copied, never waits on a step.
  std::vector<StepRecord> recent_steps() const { return step_log_.recent(); }
  // Every KV block's state ([num_blocks]) as of the last step, refreshed at most every 100 ms while
  // requests run and after the step that leaves the engine idle.
  std::vector<cache::BlockState> block_states() const;
  static constexpr size_t kStepLogCapacity = 256;
  bool alive() const { return alive_.load(); }
  const EngineConfig& config() const { return config_; }
  int max_model_len() const { return config_.max_model_len; }

 private:
  void loop();
  void step();
  void fail_all(const std::string& message);  // after an EngineFault: every request ends with an error
  void admit_and_cancel();
  void process_outputs(const SchedulerOutput& out);
  void sample_sequence(Sequence* seq, const float* logits);
  // Structured output: whether the grammar lets `token` come next in `seq`; and `logits` with every other
  // token at -inf, in masked_row_ (returns how many tokens are left).
  bool grammar_allows(const Sequence& seq, int32_t token) const;
  int mask_grammar(const Sequence& seq, std::span<const float> logits);
  // The tokenizer's vocabulary as the grammar matchers read it, built for the first constrained request.
  std::shared_ptr<const grammar::TokenVocab> grammar_vocab();
  void step_beams(RequestState* r, const std::vector<const float*>& rows);
  void fork(RequestState* r);
  void finish_sequence(Sequence* seq, FinishReason reason, std::string tail = {});
  void finish_request(RequestState* r, FinishReason reason);
  void emit(RequestState* r, Event ev);
  void publish_gauges();  // running / waiting / KV blocks into stats_; mu_ held
  void record_step(const SchedulerOutput& out, std::chrono::steady_clock::time_point started);
  void publish_block_states(bool force);

  Model& model_;
  const Tokenizer& tokenizer_;
  cache::KvCache& kv_;
  EngineConfig config_;
  Scheduler scheduler_;
  StepCostModel step_cost_model_;  // engine thread only

  // Owned by the engine thread.
  std::map<uint64_t, std::unique_ptr<RequestState>> requests_;
  std::vector<float> logits_;  // [rows, vocab]
  std::vector<float> masked_row_;  // [vocab]: a logits row with the end tokens masked (before min_tokens)
  std::vector<uint32_t> grammar_mask_;  // [(vocab + 31) / 32]: bit t of word t / 32 when the grammar allows t
  std::once_flag grammar_vocab_once_;
  std::shared_ptr<const grammar::TokenVocab> grammar_vocab_;
  uint64_t next_arrival_ = 0;

  // Shared with submitters.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<RequestState>> incoming_;
  std::vector<uint64_t> cancels_;
  uint64_t next_id_ = 1;
  int num_queued_ = 0;  // submitted, not yet scheduled the first time
  bool stopping_ = false;
  bool dead_ = false;   // the engine thread stopped; submit() refuses
  EngineStats stats_;   // snapshot refreshed after every step
  std::atomic<bool> alive_{true};

  // The live view: written by the engine thread, copied by readers.
  StepLog step_log_{kStepLogCapacity};
  mutable std::mutex block_states_mu_;
  std::vector<cache::BlockState> block_states_;         // [num_blocks] the published snapshot
  std::vector<cache::BlockState> block_states_next_;    // [num_blocks] engine thread only
  std::chrono::steady_clock::time_point block_states_at_{};

  std::thread thread_;
};

}  // namespace inflight::engine

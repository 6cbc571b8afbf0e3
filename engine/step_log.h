// StepLog: a small ring buffer of the engine's most recent steps, for the live server view (/v1/status).
// The engine thread records one StepRecord per step; HTTP threads copy the ring. The mutex is held only
// for one record's copy (engine) or the ring's copy (readers, a few KiB), so the step never waits on a
// reader for longer than a memcpy.
#pragma once
#include <chrono>
#include <cstdint>
#include <mutex>
#include <vector>

namespace inflight::engine {

struct StepRecord {
  uint64_t step = 0;                // 1-based index of the step since the engine started
  int num_context_tokens = 0;       // prompt (prefill) tokens computed in the step
  int num_generation_tokens = 0;    // one per sequence in the generation phase
  int num_context_seqs = 0;
  int num_generation_seqs = 0;
  int num_kv_blocks_used = 0;       // after the step
  double duration_seconds = 0;      // schedule -> forward -> sample -> emit
  double predicted_seconds = 0;     // the duration the scheduler's step cost predicted; 0: none known
  std::chrono::steady_clock::time_point finished_at;
};

class StepLog {
 public:
  explicit StepLog(size_t capacity);

  size_t capacity() const { return ring_.size(); }
  // Engine thread: overwrites the oldest record once the ring is full.
  void record(const StepRecord& r);
  // Any thread: the records held, oldest first (at most capacity()).
  std::vector<StepRecord> recent() const;

 private:
  mutable std::mutex mu_;
  std::vector<StepRecord> ring_;  // [capacity]
  uint64_t num_recorded_ = 0;     // record i lives at ring_[i % capacity]
};

}  // namespace inflight::engine

#include "engine/step_log.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace inflight::engine {

StepLog::StepLog(size_t capacity) : ring_(capacity) {
  if (capacity == 0) {
    std::fprintf(stderr, "%s:%d: StepLog needs a capacity of at least 1\n", __FILE__, __LINE__);
    std::abort();
  }
}

void StepLog::record(const StepRecord& r) {
  std::lock_guard<std::mutex> lock(mu_);
  ring_[num_recorded_ % ring_.size()] = r;
  ++num_recorded_;
}

std::vector<StepRecord> StepLog::recent() const {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t cap = ring_.size();
  const size_t n = size_t(std::min<uint64_t>(num_recorded_, cap));
  std::vector<StepRecord> out;
  out.reserve(n);
  for (uint64_t i = num_recorded_ - n; i < num_recorded_; ++i) out.push_back(ring_[i % cap]);
  return out;
}

}  // namespace inflight::engine

// /metrics in the Prometheus text format (version 0.0.4). Engine counters and gauges are read from
// Engine::stats() at scrape time; latencies are observed by the HTTP side into histograms here.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace inflight::server {

// A cumulative histogram; thread-safe.
class Histogram {
 public:
  // `upper_bounds` ascending, in the observed unit; +Inf is implicit.
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);
  // Appends `_bucket`, `_sum`, `_count` lines for `name`.
  void render(const std::string& name, std::string* out) const;

 private:
  std::vector<double> upper_bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // [upper_bounds.size() + 1], per bucket (not cumulative); last is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

class Metrics {
 public:
  Metrics();

  Histogram time_to_first_token;   // seconds, request received -> first token
  Histogram inter_token_latency;   // seconds between consecutive tokens of one choice
  Histogram e2e_request_latency;   // seconds, request received -> last event
  Histogram request_queue_time;    // seconds, submitted -> first scheduled
  Histogram grammar_compile_time;  // seconds, a structured-output constraint -> its compiled grammar
  Histogram grammar_token_time;    // seconds a constrained token spent in its grammar (engine thread)

  void count_http_response(int status);
  // A request with structured output of `kind` (json_schema, json_object, regex, choice, grammar, tools).
  void count_constrained_request(const std::string& kind);

  // The whole exposition. `stats` is null while the model loads (engine series are then left out).
  std::string render(const engine::EngineStats* stats) const;

 private:
  mutable std::mutex mu_;
  std::map<int, uint64_t> http_responses_;  // status -> count
  std::map<std::string, uint64_t> constrained_requests_;  // kind -> count
};

}  // namespace inflight::server

// A benchmark run as people and programs read it: the report `vllm bench serve` prints, the JSON of
// --result-file (vLLM's keys, plus the run's settings and per-request arrays), and the one table of --sweep.
#pragma once
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "client/load_metrics.h"

namespace inflight::client {

// The settings a run was made with, as the report and the JSON state them.
struct RunSettings {
  std::string base_url;
  std::string endpoint;        // "completions" or "chat"
  std::string model;
  std::string dataset;         // a JSONL path, or "random"
  int num_prompts = 0;
  int input_len = 0;           // random prompts only
  int output_len = 0;          // random prompts, and JSONL lines without output_len
  double request_rate = 0;     // inf: all at once
  double burstiness = 1;
  int max_concurrency = 0;     // 0: no limit
  uint64_t seed = 0;
  GoodputSlo goodput;
  std::vector<double> percentiles;  // besides the median
};

struct BenchmarkRun {
  RunSettings settings;
  BenchmarkSummary summary;
  std::vector<RequestOutcome> outcomes;
  std::string date;  // UTC, ISO 8601
};

// "2026-11-26T02:13:05Z"
std::string utc_timestamp_now();

std::string format_report(const BenchmarkRun& run);
// At most `max_shown` distinct error messages with their counts; empty when every request succeeded.
std::string format_errors(std::span<const RequestOutcome> outcomes, int max_shown = 5);
// One Markdown table, a row per run: its request rate and concurrency, counts, throughputs and latencies.
std::string format_sweep_table(std::span<const BenchmarkRun> runs);

nlohmann::json result_json(const BenchmarkRun& run);

}  // namespace inflight::client

// What one benchmark request measured, and the summary of a run with the definitions of
// `vllm bench serve` (vllm/benchmarks/serve.py, calculate_metrics):
//   TTFT  start of the request to its first token-carrying chunk;
//   E2EL  start of the request to its last token-carrying chunk (the request's latency);
//   TPOT  (E2EL - TTFT) / (output_tokens - 1), over requests with more than one output token;
//   ITL   every gap between consecutive token-carrying chunks of every request, pooled;
//   throughputs divide by the run's wall-clock duration; goodput counts requests meeting every SLO given
//   (TPOT taken as 0 for requests of at most one output token, as vLLM does).
// Percentiles interpolate linearly between order statistics (numpy's default); std is the population std.
// Statistics of an empty set are 0.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace inflight::client {

struct RequestOutcome {
  bool success = false;
  std::string error;            // why it failed (HTTP status and the server's message, or the transport error)
  int64_t prompt_tokens = 0;    // the server's usage.prompt_tokens, else the client's own count (0: unknown)
  int64_t output_tokens = 0;    // the server's usage.completion_tokens, else the number of token-carrying chunks
  bool usage_reported = false;  // both counts above are the server's
  int64_t num_chunks = 0;       // token-carrying chunks received
  double start_s = 0;           // request sent, seconds since the run started
  double ttft_s = 0;
  double latency_s = 0;         // E2EL
  std::vector<double> itl_s;    // [num_chunks - 1] gaps between token-carrying chunks, seconds
  std::string generated_text;
};

// Service-level objectives for goodput, milliseconds; unset ones are not checked.
struct GoodputSlo {
  std::optional<double> ttft_ms, tpot_ms, e2el_ms;
  bool empty() const { return !ttft_ms && !tpot_ms && !e2el_ms; }
};
// "ttft:500,tpot:50,e2el:2000" (commas or spaces between pairs, any subset). Throws std::invalid_argument
// naming the bad pair.
GoodputSlo parse_goodput(const std::string& spec);

// p in [0, 100]; linear interpolation between the closest ranks. Empty: 0.
double percentile(std::vector<double> values, double p);

struct LatencyStats {
  double mean_ms = 0, median_ms = 0, std_ms = 0;
  std::vector<std::pair<double, double>> percentiles_ms;  // (p, value) in the order asked
};
LatencyStats latency_stats(std::span<const double> seconds, std::span<const double> percentiles);

// 0 when the request has at most one output token.
double tpot_seconds(const RequestOutcome& r);
bool meets_slo(const RequestOutcome& r, const GoodputSlo& slo);

struct BenchmarkSummary {
  int64_t num_requests = 0;
  int64_t completed = 0;  // successful requests
  int64_t failed = 0;
  double duration_s = 0;
  int64_t total_input_tokens = 0;   // over successful requests
  int64_t total_output_tokens = 0;  // over successful requests
  double request_throughput = 0;    // successful requests / s
  std::optional<double> request_goodput;  // requests meeting every SLO / s; only when SLOs were given
  double output_throughput = 0;     // output tokens / s
  double total_token_throughput = 0;  // (input + output tokens) / s
  // Highest count of token-carrying chunks in one whole second of the run, and of requests active in one
  // second (vLLM's "peak" lines).
  double max_output_tokens_per_s = 0;
  int64_t max_concurrent_requests = 0;
  LatencyStats ttft, tpot, itl, e2el;
};

BenchmarkSummary summarize(std::span<const RequestOutcome> outcomes, double duration_s, const GoodputSlo& slo,
                           std::span<const double> percentiles);

}  // namespace inflight::client

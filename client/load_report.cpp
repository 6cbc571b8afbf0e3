#include "client/load_report.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>

namespace inflight::client {

namespace {

std::string format(const char* fmt, auto... args) {
  char buf[256];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}

std::string centered(const std::string& title, char fill) {
  constexpr size_t kWidth = 50;
  if (title.size() >= kWidth) return title + "\n";
  const size_t left = (kWidth - title.size()) / 2;
  return std::string(left, fill) + title + std::string(kWidth - title.size() - left, fill) + "\n";
}

std::string line(const std::string& label, const std::string& value) { return format("%-40s %-10s\n", label.c_str(), value.c_str()); }
std::string fixed2(double v) { return format("%.2f", v); }

// "99" for 99, "99.9" for 99.9: the key suffix vLLM uses.
std::string percentile_name(double p) {
  if (p == std::floor(p)) return format("%.0f", p);
  return format("%g", p);
}

std::string rate_text(double rate) { return std::isinf(rate) ? "inf" : format("%g", rate); }

struct MetricNames {
  const char* key;    // "ttft"
  const char* label;  // "TTFT"
  const char* title;  // the section's header
  const LatencyStats BenchmarkSummary::*stats;
};
constexpr MetricNames kMetrics[] = {
    {"ttft", "TTFT", "Time to First Token", &BenchmarkSummary::ttft},
    {"tpot", "TPOT", "Time per Output Token (excl. 1st token)", &BenchmarkSummary::tpot},
    {"itl", "ITL", "Inter-token Latency", &BenchmarkSummary::itl},
    {"e2el", "E2EL", "End-to-end Latency", &BenchmarkSummary::e2el},
};

}  // namespace

std::string utc_timestamp_now() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string format_report(const BenchmarkRun& run) {
  const RunSettings& c = run.settings;
  const BenchmarkSummary& s = run.summary;
  std::string out = centered(" Serving Benchmark Result ", '=');
  out += line("Successful requests:", std::to_string(s.completed));
  out += line("Failed requests:", std::to_string(s.failed));
  if (c.max_concurrency > 0) out += line("Maximum request concurrency:", std::to_string(c.max_concurrency));
  if (!std::isinf(c.request_rate)) out += line("Request rate configured (RPS):", fixed2(c.request_rate));
  out += line("Benchmark duration (s):", fixed2(s.duration_s));
  out += line("Total input tokens:", std::to_string(s.total_input_tokens));
  out += line("Total generated tokens:", std::to_string(s.total_output_tokens));
  out += line("Request throughput (req/s):", fixed2(s.request_throughput));
  if (s.request_goodput) out += line("Request goodput (req/s):", fixed2(*s.request_goodput));
  out += line("Output token throughput (tok/s):", fixed2(s.output_throughput));
  out += line("Peak output token throughput (tok/s):", fixed2(s.max_output_tokens_per_s));
  out += line("Peak concurrent requests:", std::to_string(s.max_concurrent_requests));
  out += line("Total Token throughput (tok/s):", fixed2(s.total_token_throughput));
  for (const MetricNames& m : kMetrics) {
    const LatencyStats& st = s.*m.stats;
    out += centered(m.title, '-');
    out += line(format("Mean %s (ms):", m.label), fixed2(st.mean_ms));
    out += line(format("Median %s (ms):", m.label), fixed2(st.median_ms));
    out += line(format("Std %s (ms):", m.label), fixed2(st.std_ms));
    for (const auto& [p, v] : st.percentiles_ms)
      out += line(format("P%s %s (ms):", percentile_name(p).c_str(), m.label), fixed2(v));
  }
  out += std::string(50, '=') + "\n";
  out += format_errors(run.outcomes);
  return out;
}

std::string format_errors(std::span<const RequestOutcome> outcomes, int max_shown) {
  std::map<std::string, int> counts;
  std::vector<std::string> order;  // first appearance
  for (const RequestOutcome& r : outcomes) {
    if (r.success) continue;
    if (counts[r.error]++ == 0) order.push_back(r.error);
  }
  if (order.empty()) return {};
  int64_t num_failed = 0;
  for (const auto& [_, n] : counts) num_failed += n;
  std::string out = "Failed requests: " + std::to_string(num_failed) + " of " + std::to_string(outcomes.size()) +
                    "; errors (count x message):\n";
  for (size_t i = 0; i < order.size() && int(i) < max_shown; ++i)
    out += "  " + std::to_string(counts[order[i]]) + " x " + order[i] + "\n";
  if (int(order.size()) > max_shown) out += "  ... and " + std::to_string(order.size() - size_t(max_shown)) + " more distinct errors\n";
  return out;
}

std::string format_sweep_table(std::span<const BenchmarkRun> runs) {
  std::string p_label = "P99";
  if (!runs.empty() && !runs[0].settings.percentiles.empty())
    p_label = "P" + percentile_name(runs[0].settings.percentiles.back());
  const bool goodput = !runs.empty() && runs[0].summary.request_goodput.has_value();
  std::string out = "| rate (req/s) | concurrency | ok | failed | duration (s) | req/s |";
  if (goodput) out += " goodput (req/s) |";
  out += " output tok/s | total tok/s | TTFT mean | TTFT median | TTFT " + p_label + " | TPOT mean | TPOT median | TPOT " +
         p_label + " | ITL mean | ITL " + p_label + " | E2EL mean | E2EL " + p_label + " |\n";
  const int num_columns = 18 + (goodput ? 1 : 0);
  out += "|";
  for (int i = 0; i < num_columns; ++i) out += i < 2 ? "---|" : "---:|";
  out += "\n";
  const auto last_p = [](const LatencyStats& st) { return st.percentiles_ms.empty() ? 0.0 : st.percentiles_ms.back().second; };
  for (const BenchmarkRun& r : runs) {
    const BenchmarkSummary& s = r.summary;
    out += "| " + rate_text(r.settings.request_rate) + " | " +
           (r.settings.max_concurrency > 0 ? std::to_string(r.settings.max_concurrency) : std::string("none")) + " | " +
           std::to_string(s.completed) + " | " + std::to_string(s.failed) + " | " + fixed2(s.duration_s) + " | " +
           fixed2(s.request_throughput) + " |";
    if (goodput) out += " " + fixed2(s.request_goodput.value_or(0)) + " |";
    out += " " + fixed2(s.output_throughput) + " | " + fixed2(s.total_token_throughput) + " | " + fixed2(s.ttft.mean_ms) +
           " | " + fixed2(s.ttft.median_ms) + " | " + fixed2(last_p(s.ttft)) + " | " + fixed2(s.tpot.mean_ms) + " | " +
           fixed2(s.tpot.median_ms) + " | " + fixed2(last_p(s.tpot)) + " | " + fixed2(s.itl.mean_ms) + " | " +
           fixed2(last_p(s.itl)) + " | " + fixed2(s.e2el.mean_ms) + " | " + fixed2(last_p(s.e2el)) + " |\n";
  }
  out += "(latencies in ms)\n";
  return out;
}

nlohmann::json result_json(const BenchmarkRun& run) {
  using nlohmann::json;
  const RunSettings& c = run.settings;
  const BenchmarkSummary& s = run.summary;
  json j;
  j["date"] = run.date;
  j["base_url"] = c.base_url;
  j["endpoint"] = c.endpoint;
  j["model_id"] = c.model;
  j["dataset"] = c.dataset;
  j["num_prompts"] = c.num_prompts;
  j["input_len"] = c.input_len;
  j["output_len"] = c.output_len;
  j["request_rate"] = std::isinf(c.request_rate) ? json("inf") : json(c.request_rate);
  j["burstiness"] = c.burstiness;
  j["max_concurrency"] = c.max_concurrency > 0 ? json(c.max_concurrency) : json(nullptr);
  j["seed"] = c.seed;
  json slo = json::object();
  if (c.goodput.ttft_ms) slo["ttft"] = *c.goodput.ttft_ms;
  if (c.goodput.tpot_ms) slo["tpot"] = *c.goodput.tpot_ms;
  if (c.goodput.e2el_ms) slo["e2el"] = *c.goodput.e2el_ms;
  j["goodput_slo_ms"] = slo;

  j["duration"] = s.duration_s;
  j["completed"] = s.completed;
  j["failed"] = s.failed;
  j["total_input_tokens"] = s.total_input_tokens;
  j["total_output_tokens"] = s.total_output_tokens;
  j["request_throughput"] = s.request_throughput;
  j["request_goodput"] = s.request_goodput ? json(*s.request_goodput) : json(nullptr);
  j["output_throughput"] = s.output_throughput;
  j["total_token_throughput"] = s.total_token_throughput;
  j["max_output_tokens_per_s"] = s.max_output_tokens_per_s;
  j["max_concurrent_requests"] = s.max_concurrent_requests;
  for (const MetricNames& m : kMetrics) {
    const LatencyStats& st = s.*m.stats;
    const std::string k = m.key;
    j["mean_" + k + "_ms"] = st.mean_ms;
    j["median_" + k + "_ms"] = st.median_ms;
    j["std_" + k + "_ms"] = st.std_ms;
    for (const auto& [p, v] : st.percentiles_ms) j["p" + percentile_name(p) + "_" + k + "_ms"] = v;
  }

  // Per request, in prompt order; failed requests count 0 tokens, as in vLLM's output_lens.
  json input_lens = json::array(), output_lens = json::array(), ttfts = json::array(), e2els = json::array(),
       itls = json::array(), texts = json::array(), errors = json::array(), usage = json::array(),
       starts = json::array();
  for (const RequestOutcome& r : run.outcomes) {
    input_lens.push_back(r.prompt_tokens);
    output_lens.push_back(r.success ? r.output_tokens : 0);
    ttfts.push_back(r.ttft_s);
    e2els.push_back(r.latency_s);
    itls.push_back(r.itl_s);
    texts.push_back(r.generated_text);
    errors.push_back(r.error);
    usage.push_back(r.usage_reported);
    starts.push_back(r.start_s);
  }
  j["input_lens"] = input_lens;
  j["output_lens"] = output_lens;
  j["ttfts"] = ttfts;
  j["e2els"] = e2els;
  j["itls"] = itls;
  j["start_times"] = starts;
  j["usage_reported"] = usage;
  j["generated_texts"] = texts;
  j["errors"] = errors;
  return j;
}

}  // namespace inflight::client

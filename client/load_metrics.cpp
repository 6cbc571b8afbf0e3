#include "client/load_metrics.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>
#include <stdexcept>

namespace inflight::client {

GoodputSlo parse_goodput(const std::string& spec) {
  GoodputSlo slo;
  std::string normalised = spec;
  std::replace(normalised.begin(), normalised.end(), ',', ' ');
  std::istringstream in(normalised);
  for (std::string pair; in >> pair;) {
    const size_t colon = pair.find(':');
    if (colon == std::string::npos)
      throw std::invalid_argument("--goodput: '" + pair + "' is not NAME:MILLISECONDS (ttft, tpot, e2el)");
    const std::string name = pair.substr(0, colon);
    double ms = 0;
    try {
      size_t used = 0;
      ms = std::stod(pair.substr(colon + 1), &used);
      if (used != pair.size() - colon - 1) throw std::invalid_argument("trailing characters");
    } catch (const std::exception&) {
      throw std::invalid_argument("--goodput: '" + pair + "': the value is not a number of milliseconds");
    }
    if (!(ms >= 0)) throw std::invalid_argument("--goodput: '" + pair + "': the value must be >= 0");
    if (name == "ttft") slo.ttft_ms = ms;
    else if (name == "tpot") slo.tpot_ms = ms;
    else if (name == "e2el") slo.e2el_ms = ms;
    else throw std::invalid_argument("--goodput: unknown metric '" + name + "' (ttft, tpot, e2el)");
  }
  if (slo.empty()) throw std::invalid_argument("--goodput: no SLO given (e.g. ttft:500,tpot:50)");
  return slo;
}

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * double(values.size() - 1);
  const size_t lo = size_t(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (rank - double(lo)) * (values[hi] - values[lo]);
}

LatencyStats latency_stats(std::span<const double> seconds, std::span<const double> percentiles) {
  LatencyStats s;
  const std::vector<double> ms = [&] {
    std::vector<double> v(seconds.begin(), seconds.end());
    for (double& x : v) x *= 1000.0;
    return v;
  }();
  if (!ms.empty()) {
    s.mean_ms = std::accumulate(ms.begin(), ms.end(), 0.0) / double(ms.size());
    double sq = 0;
    for (double x : ms) sq += (x - s.mean_ms) * (x - s.mean_ms);
    s.std_ms = std::sqrt(sq / double(ms.size()));
  }
  s.median_ms = percentile(ms, 50);
  for (double p : percentiles) s.percentiles_ms.emplace_back(p, percentile(ms, p));
  return s;
}

double tpot_seconds(const RequestOutcome& r) {
  if (r.output_tokens <= 1) return 0;
  return (r.latency_s - r.ttft_s) / double(r.output_tokens - 1);
}

bool meets_slo(const RequestOutcome& r, const GoodputSlo& slo) {
  if (!r.success) return false;
  if (slo.ttft_ms && r.ttft_s * 1000.0 > *slo.ttft_ms) return false;
  if (slo.tpot_ms && tpot_seconds(r) * 1000.0 > *slo.tpot_ms) return false;
  if (slo.e2el_ms && r.latency_s * 1000.0 > *slo.e2el_ms) return false;
  return true;
}

namespace {

// vLLM's peak lines: one-second buckets from the first successful request's start.
void fill_peaks(std::span<const RequestOutcome> outcomes, BenchmarkSummary* s) {
  double first_start = 0, last_end = 0;
  bool any = false;
  for (const RequestOutcome& r : outcomes) {
    if (!r.success) continue;
    first_start = any ? std::min(first_start, r.start_s) : r.start_s;
    last_end = any ? std::max(last_end, r.start_s + r.latency_s) : r.start_s + r.latency_s;
    any = true;
  }
  if (!any) return;
  const size_t num_seconds = size_t(std::ceil(last_end - first_start)) + 1;
  std::vector<double> chunks_per_second(num_seconds, 0.0);
  std::vector<int64_t> requests_per_second(num_seconds, 0);
  const auto bucket = [&](double t) { return int64_t(t - first_start); };
  const auto count_chunk = [&](double t) {
    const int64_t b = bucket(t);
    if (b >= 0 && b < int64_t(num_seconds)) chunks_per_second[size_t(b)] += 1;
  };
  for (const RequestOutcome& r : outcomes) {
    if (!r.success) continue;
    double t = r.start_s + r.ttft_s;
    count_chunk(t);
    for (double gap : r.itl_s) count_chunk(t += gap);
    const int64_t end = std::min(bucket(r.start_s + r.latency_s), int64_t(num_seconds) - 1);
    for (int64_t b = std::max<int64_t>(bucket(r.start_s), 0); b <= end; ++b) ++requests_per_second[size_t(b)];
  }
  s->max_output_tokens_per_s = *std::max_element(chunks_per_second.begin(), chunks_per_second.end());
  s->max_concurrent_requests = *std::max_element(requests_per_second.begin(), requests_per_second.end());
}

}  // namespace

BenchmarkSummary summarize(std::span<const RequestOutcome> outcomes, double duration_s, const GoodputSlo& slo,
                           std::span<const double> percentiles) {
  BenchmarkSummary s;
  s.num_requests = int64_t(outcomes.size());
  s.duration_s = duration_s;
  std::vector<double> ttfts, tpots, itls, e2els;
  int64_t good = 0;
  for (const RequestOutcome& r : outcomes) {
    if (!r.success) {
      ++s.failed;
      continue;
    }
    ++s.completed;
    s.total_input_tokens += r.prompt_tokens;
    s.total_output_tokens += r.output_tokens;
    if (r.output_tokens > 1) tpots.push_back(tpot_seconds(r));
    ttfts.push_back(r.ttft_s);
    e2els.push_back(r.latency_s);
    itls.insert(itls.end(), r.itl_s.begin(), r.itl_s.end());
    if (!slo.empty() && meets_slo(r, slo)) ++good;
  }
  const double d = duration_s > 0 ? duration_s : 1e-9;
  s.request_throughput = double(s.completed) / d;
  if (!slo.empty()) s.request_goodput = double(good) / d;
  s.output_throughput = double(s.total_output_tokens) / d;
  s.total_token_throughput = double(s.total_input_tokens + s.total_output_tokens) / d;
  s.ttft = latency_stats(ttfts, percentiles);
  s.tpot = latency_stats(tpots, percentiles);
  s.itl = latency_stats(itls, percentiles);
  s.e2el = latency_stats(e2els, percentiles);
  fill_peaks(outcomes, &s);
  return s;
}

}  // namespace inflight::client

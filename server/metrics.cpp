#include "server/metrics.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace inflight::server {

namespace {

// The shortest of %.15g / %.17g that reads back as `v` (0.1 stays "0.1").
std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.15g", v);
  if (std::strtod(buf, nullptr) != v) std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

void header(std::string* out, const std::string& name, const char* type, const char* help) {
  *out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void sample(std::string* out, const std::string& name, double value, const std::string& labels = {}) {
  *out += name + (labels.empty() ? "" : "{" + labels + "}") + " " + number(value) + "\n";
}

const std::vector<double> kLatencyBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                             0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0};
const std::vector<double> kTokenGapBuckets = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
                                              0.15,  0.2,    0.3,   0.4,  0.5,  0.75, 1.0,  2.5,  5.0};
const std::vector<double> kGrammarBuckets = {0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001,
                                             0.0025,  0.005,    0.01,    0.025,  0.05,    0.1,    0.25};
const std::vector<double> kRequestBuckets = {0.05, 0.1,  0.25, 0.5,  1.0,   2.5,   5.0,   10.0,
                                             20.0, 40.0, 60.0, 80.0, 120.0, 240.0, 480.0, 960.0};

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)), counts_(upper_bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  const size_t bucket = size_t(std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), value) - upper_bounds_.begin());
  std::lock_guard<std::mutex> lock(mu_);
  counts_[bucket]++;
  sum_ += value;
  count_++;
}

void Histogram::render(const std::string& name, std::string* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < upper_bounds_.size(); ++i) {
    cumulative += counts_[i];
    sample(out, name + "_bucket", double(cumulative), "le=\"" + number(upper_bounds_[i]) + "\"");
  }
  sample(out, name + "_bucket", double(count_), "le=\"+Inf\"");
  sample(out, name + "_sum", sum_);
  sample(out, name + "_count", double(count_));
}

Metrics::Metrics()
    : time_to_first_token(kLatencyBuckets),
      inter_token_latency(kTokenGapBuckets),
      e2e_request_latency(kRequestBuckets),
      request_queue_time(kRequestBuckets),
      grammar_compile_time(kGrammarBuckets),
      grammar_token_time(kGrammarBuckets) {}

void Metrics::count_constrained_request(const std::string& kind) {
  std::lock_guard<std::mutex> lock(mu_);
  constrained_requests_[kind]++;
}

void Metrics::count_http_response(int status) {
  std::lock_guard<std::mutex> lock(mu_);
  http_responses_[status]++;
}

std::string Metrics::render(const engine::EngineStats* stats) const {
  std::string out;
  if (stats != nullptr) {
    const engine::EngineStats& s = *stats;
    header(&out, "inflight_requests_total", "counter", "Finished requests (choices), by finish reason.");
    for (const char* reason : {"stop", "length", "cancelled", "error"}) {
      auto it = s.finished_by_reason.find(reason);
      sample(&out, "inflight_requests_total", it == s.finished_by_reason.end() ? 0.0 : double(it->second),
             std::string("finish_reason=\"") + reason + "\"");
    }
    header(&out, "inflight_prompt_tokens_total", "counter", "Prompt tokens computed (prefix cache hits excluded).");
    sample(&out, "inflight_prompt_tokens_total", double(s.prompt_tokens));
    header(&out, "inflight_generation_tokens_total", "counter", "Tokens generated.");
    sample(&out, "inflight_generation_tokens_total", double(s.generated_tokens));
    header(&out, "inflight_preemptions_total", "counter", "Sequences preempted for lack of KV cache blocks.");
    sample(&out, "inflight_preemptions_total", double(s.num_preemptions));
    header(&out, "inflight_prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.");
    sample(&out, "inflight_prefix_cache_queries_total", double(s.prefix_query_tokens));
    header(&out, "inflight_prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache.");
    sample(&out, "inflight_prefix_cache_hits_total", double(s.prefix_hit_tokens));
    header(&out, "inflight_engine_steps_total", "counter", "Engine steps run.");
    sample(&out, "inflight_engine_steps_total", double(s.num_steps));

    header(&out, "inflight_num_requests_running", "gauge", "Requests scheduled at least once and not finished.");
    sample(&out, "inflight_num_requests_running", s.num_running);
    header(&out, "inflight_num_requests_waiting", "gauge", "Requests waiting to start.");
    sample(&out, "inflight_num_requests_waiting", s.num_waiting);
    header(&out, "inflight_kv_cache_usage_ratio", "gauge", "Share of KV cache blocks in use, 0 to 1.");
    sample(&out, "inflight_kv_cache_usage_ratio",
           s.kv_blocks_total > 0 ? double(s.kv_blocks_used) / double(s.kv_blocks_total) : 0.0);
    header(&out, "inflight_kv_cache_blocks_used", "gauge", "KV cache blocks in use.");
    sample(&out, "inflight_kv_cache_blocks_used", s.kv_blocks_used);
    header(&out, "inflight_kv_cache_blocks_total", "gauge", "KV cache blocks in all.");
    sample(&out, "inflight_kv_cache_blocks_total", s.kv_blocks_total);
  }
  header(&out, "inflight_time_to_first_token_seconds", "histogram", "Time from request arrival to its first token.");
  time_to_first_token.render("inflight_time_to_first_token_seconds", &out);
  header(&out, "inflight_inter_token_latency_seconds", "histogram", "Time between consecutive tokens of one choice.");
  inter_token_latency.render("inflight_inter_token_latency_seconds", &out);
  header(&out, "inflight_e2e_request_latency_seconds", "histogram", "Time from request arrival to its end.");
  e2e_request_latency.render("inflight_e2e_request_latency_seconds", &out);
  header(&out, "inflight_request_queue_time_seconds", "histogram", "Time requests waited before their first step.");
  request_queue_time.render("inflight_request_queue_time_seconds", &out);
  header(&out, "inflight_grammar_compile_seconds", "histogram",
         "Time to compile a request's structured-output constraint into its grammar (cached ones included).");
  grammar_compile_time.render("inflight_grammar_compile_seconds", &out);
  header(&out, "inflight_grammar_token_seconds", "histogram",
         "Time a constrained token spent in its grammar: the sampled token's check, the mask where needed.");
  grammar_token_time.render("inflight_grammar_token_seconds", &out);

  header(&out, "inflight_http_responses_total", "counter", "HTTP responses, by status code.");
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [status, count] : http_responses_)
    sample(&out, "inflight_http_responses_total", double(count), "code=\"" + std::to_string(status) + "\"");
  header(&out, "inflight_constrained_requests_total", "counter",
         "Requests with structured output, by kind (json_schema, json_object, regex, choice, grammar, tools).");
  for (const auto& [kind, count] : constrained_requests_)
    sample(&out, "inflight_constrained_requests_total", double(count), "kind=\"" + kind + "\"");
  return out;
}

}  // namespace inflight::server

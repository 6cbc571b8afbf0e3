// `inflight bench`: the bundled load-test client for OpenAI-compatible servers (client/load_client.h), with
// the flags and the report of `vllm bench serve`.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "client/load_client.h"
#include "client/load_report.h"
#include "client/prompt_dataset.h"
#include "cli/commands.h"

namespace inflight::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct BenchFlags {
  std::string base_url = "http://127.0.0.1:8000";
  std::string endpoint = "completions";
  std::string model;
  std::string api_key;
  int num_prompts = 100;
  std::string request_rate = "inf";
  double burstiness = 1.0;
  int max_concurrency = 0;
  std::string dataset;
  int input_len = 128;
  int output_len = 128;
  int vocab_size = 512;
  uint64_t seed = 0;
  double temperature = 0;
  bool ignore_eos = false;
  std::string goodput;
  std::string percentiles = "90,99";
  std::string result_file;
  std::string sweep;
  std::string extra_body;
  double ready_timeout_s = 0;
  double request_timeout_s = 3600;
  int max_failures = 0;
  bool no_progress = false;
};

double parse_rate(const std::string& text, const std::string& flag) {
  if (text == "inf") return std::numeric_limits<double>::infinity();
  try {
    size_t used = 0;
    const double r = std::stod(text, &used);
    if (used == text.size() && r > 0 && std::isfinite(r)) return r;
  } catch (const std::exception&) {
  }
  throw std::invalid_argument(flag + ": '" + text + "' is not a positive number of requests/s or inf");
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

std::vector<double> parse_percentiles(const std::string& text) {
  std::vector<double> out;
  for (const std::string& item : split_list(text)) {
    double p = -1;
    try {
      p = std::stod(item);
    } catch (const std::exception&) {
    }
    if (!(p > 0 && p < 100))
      throw std::invalid_argument("--percentiles: '" + item + "' is not a percentile in (0, 100)");
    out.push_back(p);
  }
  return out;
}

// Requests done out of the total on stderr: redrawn in place on a terminal, a line per tenth otherwise.
class ProgressBar {
 public:
  ProgressBar(int64_t total, std::string label, bool enabled)
      : total_(total), label_(std::move(label)), enabled_(enabled), tty_(isatty(STDERR_FILENO)),
        start_(Clock::now()) {}

  void update(int64_t done, int64_t failed) {
    if (!enabled_ || total_ <= 0) return;
    const auto now = Clock::now();
    const int64_t tenth = done * 10 / total_;
    if (tty_) {
      if (done != total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    } else if (tenth == last_tenth_ && done != total_) {
      return;
    }
    last_draw_ = now;
    last_tenth_ = tenth;
    constexpr int kWidth = 30;
    const int filled = int(done * kWidth / total_);
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    std::fprintf(stderr, "%s%s [%s%s] %lld/%lld requests, %lld failed, %.1f s%s", tty_ ? "\r" : "", label_.c_str(),
                 std::string(size_t(filled), '#').c_str(), std::string(size_t(kWidth - filled), '.').c_str(),
                 (long long)done, (long long)total_, (long long)failed, elapsed, tty_ ? "" : "\n");
    if (tty_ && done == total_) std::fputc('\n', stderr);
    std::fflush(stderr);
  }

 private:
  int64_t total_;
  std::string label_;
  bool enabled_, tty_;
  Clock::time_point start_, last_draw_{};
  int64_t last_tenth_ = -1;
};

// Retries `attempt` (it returns an error message, empty on success) while the server is not up yet
// (connection refused, 503 while loading) and `ready_timeout_s` has not passed; other errors end it at once.
void retry_until_ready(double ready_timeout_s, const std::function<std::string()>& attempt) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(ready_timeout_s);
  for (;;) {
    const std::string error = attempt();
    if (error.empty()) return;
    const bool not_ready = error.find("connect:") != std::string::npos || error.find("HTTP 503") != std::string::npos;
    if (!not_ready || Clock::now() >= deadline) throw std::runtime_error(error);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

// The first prompt, once, before the clock starts (as vLLM's initial test run): it proves the settings are
// accepted.
std::string send_test_request(const client::LoadOptions& options, const client::BenchPrompt& prompt) {
  client::LoadOptions one = options;
  one.request_rate = std::numeric_limits<double>::infinity();
  one.max_concurrency = 1;
  const client::LoadRunResult r = client::run_load(one, std::span(&prompt, 1), {});
  const client::RequestOutcome& o = r.outcomes[0];
  return o.success ? std::string() : "the initial test request to " + options.base_url + " failed: " + o.error;
}

void run_bench(const BenchFlags& f) {
  client::LoadOptions options;
  options.base_url = f.base_url;
  client::parse_base_url(f.base_url);  // a bad URL fails here, before any prompt is made
  if (f.endpoint == "completions") options.api = client::ApiKind::Completions;
  else if (f.endpoint == "chat") options.api = client::ApiKind::Chat;
  else throw std::invalid_argument("--endpoint: '" + f.endpoint + "' (completions, chat)");
  options.api_key = f.api_key;
  if (options.api_key.empty())
    if (const char* env = std::getenv("OPENAI_API_KEY")) options.api_key = env;
  if (f.num_prompts < 1) throw std::invalid_argument("--num-prompts must be at least 1");
  if (f.max_failures < 0) throw std::invalid_argument("--max-failures must be >= 0");
  if (f.max_concurrency < 0) throw std::invalid_argument("--max-concurrency must be >= 0 (0: no limit)");
  if (!(f.burstiness > 0)) throw std::invalid_argument("--burstiness must be > 0");
  options.burstiness = f.burstiness;
  options.max_concurrency = f.max_concurrency;
  options.seed = f.seed;
  options.temperature = f.temperature;
  options.request_timeout_s = f.request_timeout_s;
  if (!f.extra_body.empty()) {
    options.extra_body = nlohmann::json::parse(f.extra_body, nullptr, /*allow_exceptions=*/false);
    if (options.extra_body.is_discarded() || !options.extra_body.is_object())
      throw std::invalid_argument("--extra-body must be a JSON object");
  }
  std::vector<double> rates;
  for (const std::string& r : split_list(f.sweep.empty() ? f.request_rate : f.sweep))
    rates.push_back(parse_rate(r, f.sweep.empty() ? "--request-rate" : "--sweep"));
  if (rates.empty()) throw std::invalid_argument("--sweep: no request rate given");
  const std::vector<double> percentiles = parse_percentiles(f.percentiles);
  const client::GoodputSlo slo = f.goodput.empty() ? client::GoodputSlo{} : client::parse_goodput(f.goodput);

  std::vector<client::BenchPrompt> prompts;
  if (f.dataset.rfind(client::kMixedDatasetPrefix, 0) == 0) {
    prompts = client::mixed_prompts(f.dataset, f.num_prompts, f.vocab_size, options.api == client::ApiKind::Chat, f.seed);
    options.ignore_eos = true;  // like random prompts: exactly each class's output length
  } else if (!f.dataset.empty()) {
    prompts = client::load_jsonl_prompts(f.dataset, f.num_prompts, f.output_len, f.seed);
    options.ignore_eos = f.ignore_eos;
  } else {
    prompts = options.api == client::ApiKind::Chat
                  ? client::random_word_prompts(f.num_prompts, f.input_len, f.output_len, f.seed)
                  : client::random_token_prompts(f.num_prompts, f.input_len, f.output_len, f.vocab_size, f.seed);
    options.ignore_eos = true;  // random prompts produce exactly output_len tokens
  }

  options.model = f.model;
  retry_until_ready(f.ready_timeout_s, [&]() -> std::string {
    if (!options.model.empty()) return {};
    try {
      options.model = client::fetch_first_model_id(options);
      return {};
    } catch (const std::runtime_error& e) {
      return e.what();
    }
  });
  retry_until_ready(f.ready_timeout_s, [&] { return send_test_request(options, prompts[0]); });
  std::fprintf(stderr, "inflight bench: %s %s, model %s, %d prompts (%s)\n", f.base_url.c_str(),
               client::api_path(client::parse_base_url(f.base_url),
                               options.api == client::ApiKind::Chat ? "chat/completions" : "completions").c_str(),
               options.model.c_str(), f.num_prompts, f.dataset.empty() ? "random" : f.dataset.c_str());

  std::vector<client::BenchmarkRun> runs;
  for (double rate : rates) {
    options.request_rate = rate;
    client::BenchmarkRun run;
    run.settings = {.base_url = f.base_url, .endpoint = f.endpoint, .model = options.model,
                    .dataset = f.dataset.empty() ? "random" : f.dataset, .num_prompts = f.num_prompts,
                    .input_len = f.dataset.empty() ? f.input_len : 0, .output_len = f.output_len,
                    .request_rate = rate, .burstiness = f.burstiness, .max_concurrency = f.max_concurrency,
                    .seed = f.seed, .goodput = slo, .percentiles = percentiles};
    run.date = client::utc_timestamp_now();
    char rate_text[32];
    std::snprintf(rate_text, sizeof rate_text, "%g", rate);
    const std::string label = f.sweep.empty() ? "bench" : std::string("rate ") + rate_text;
    ProgressBar bar(f.num_prompts, label, !f.no_progress);
    client::LoadRunResult result =
        client::run_load(options, prompts, [&](int64_t done, int64_t failed) { bar.update(done, failed); });
    run.summary = client::summarize(result.outcomes, result.duration_s, slo, percentiles);
    run.outcomes = std::move(result.outcomes);
    if (f.sweep.empty()) std::fputs(client::format_report(run).c_str(), stdout);
    else std::fputs(client::format_errors(run.outcomes).c_str(), stdout);
    std::fflush(stdout);
    runs.push_back(std::move(run));
  }
  if (!f.sweep.empty()) std::fputs(client::format_sweep_table(runs).c_str(), stdout);

  if (!f.result_file.empty()) {
    nlohmann::json j;
    if (f.sweep.empty()) {
      j = client::result_json(runs[0]);
    } else {
      j["runs"] = nlohmann::json::array();
      for (const client::BenchmarkRun& r : runs) j["runs"].push_back(client::result_json(r));
    }
    std::ofstream out(f.result_file);
    out << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    if (!out) throw std::runtime_error("--result-file: cannot write " + f.result_file);
  }
  // A gate for scripts: the exit status is 1 when more requests failed than allowed.
  for (const client::BenchmarkRun& r : runs) {
    if (r.summary.completed == 0) throw std::runtime_error("every request failed (see the errors above)");
    if (r.summary.failed > f.max_failures)
      throw std::runtime_error(std::to_string(r.summary.failed) + " of " + std::to_string(r.settings.num_prompts) +
                               " requests failed, more than --max-failures " + std::to_string(f.max_failures) +
                               " (see the errors above)");
  }
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto flags = std::make_shared<BenchFlags>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Load-test an OpenAI-compatible server (inflight, llama-server, vLLM) like `vllm bench serve`");
  cmd->add_option("--base-url", flags->base_url, "Server URL (http only); /v1 is added unless its path ends in /v1")
      ->capture_default_str();
  cmd->add_option("--endpoint", flags->endpoint, "API to load: completions (/v1/completions) or chat "
                  "(/v1/chat/completions)")
      ->capture_default_str();
  cmd->add_option("--model", flags->model, "Model name sent with each request (default: the server's first)");
  cmd->add_option("--api-key", flags->api_key, "Bearer token (default: $OPENAI_API_KEY)");
  cmd->add_option("--num-prompts", flags->num_prompts, "Requests to send")->capture_default_str();
  cmd->add_option("--request-rate", flags->request_rate, "Requests/s (Poisson or gamma arrivals); inf: all at once")
      ->capture_default_str();
  cmd->add_option("--burstiness", flags->burstiness, "Gamma shape of arrival gaps; 1 = Poisson, lower = burstier")
      ->capture_default_str();
  cmd->add_option("--max-concurrency", flags->max_concurrency, "Requests in flight at most (0 = no limit)")
      ->capture_default_str();
  cmd->add_option("--dataset", flags->dataset,
                  "JSONL file: {\"prompt\": text or token ids, \"output_len\": N} per line; or a mix of random "
                  "prompts, mixed:INxOUT[:WEIGHT],... (e.g. mixed:1500x32:1,64x128:3) (default: random prompts)");
  cmd->add_option("--input-len", flags->input_len, "Random prompts: tokens per prompt")->capture_default_str();
  cmd->add_option("--output-len", flags->output_len, "Tokens to generate (max_tokens) per request")
      ->capture_default_str();
  cmd->add_option("--vocab-size", flags->vocab_size,
                  "Random completions prompts draw token ids from [3, N): keep N within the model's vocabulary")
      ->capture_default_str();
  cmd->add_option("--seed", flags->seed, "Seed of prompts and arrivals")->capture_default_str();
  cmd->add_option("--temperature", flags->temperature, "Sampling temperature sent")->capture_default_str();
  cmd->add_flag("--ignore-eos", flags->ignore_eos, "Send ignore_eos (always on for random prompts)");
  cmd->add_option("--goodput", flags->goodput, "SLOs in ms for goodput, e.g. ttft:500,tpot:50,e2el:2000");
  cmd->add_option("--percentiles", flags->percentiles, "Percentiles reported besides the median")
      ->capture_default_str();
  cmd->add_option("--result-file", flags->result_file, "Write every metric and per-request data as JSON");
  cmd->add_option("--sweep", flags->sweep, "Request rates to run in turn, e.g. 1,4,16,inf; prints one table");
  cmd->add_option("--extra-body", flags->extra_body, "JSON object merged into every request body");
  cmd->add_option("--ready-timeout", flags->ready_timeout_s,
                  "Seconds to keep retrying the initial request while the server is not up yet")
      ->capture_default_str();
  cmd->add_option("--request-timeout", flags->request_timeout_s, "Seconds of silence before a request fails")
      ->capture_default_str();
  cmd->add_option("--max-failures", flags->max_failures,
                  "Failed requests tolerated (per run of a sweep) before the exit status is 1")
      ->capture_default_str();
  cmd->add_flag("--no-progress", flags->no_progress, "No progress bar on stderr");
  cmd->callback([flags] { run_bench(*flags); });
}

}  // namespace inflight::cli

// The load generator behind `inflight bench`: streaming requests to an OpenAI-compatible server (inflight,
// llama.cpp's llama-server, vLLM) over HTTP/1.1 on Boost.Beast, one connection per request, all on one
// Asio thread. Arrivals follow `vllm bench serve`: the first request at once, then gaps drawn from a gamma
// distribution of shape `burstiness` and mean 1/request_rate (burstiness 1: a Poisson process); a request
// that arrives while `max_concurrency` are in flight waits, and its clock starts when it is sent.
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "client/load_metrics.h"
#include "client/openai_stream.h"
#include "client/prompt_dataset.h"

namespace inflight::client {

// "http://host[:port][/prefix]"; the port defaults to 80.
struct ServerUrl {
  std::string host;
  std::string port;
  std::string path_prefix;  // without a trailing '/'; may end in "/v1"
};
// Throws std::invalid_argument for anything else (https included: there is no TLS here).
ServerUrl parse_base_url(const std::string& url);
// prefix + "/v1/completions" or "/v1/chat/completions", "/v1" written once when the prefix ends with it.
std::string api_path(const ServerUrl& url, const std::string& route_under_v1);

struct LoadOptions {
  std::string base_url = "http://127.0.0.1:8000";
  ApiKind api = ApiKind::Completions;
  std::string model;             // empty: the field is left out
  std::string api_key;           // empty: no Authorization header
  double request_rate = std::numeric_limits<double>::infinity();  // requests/s; inf: all at once
  double burstiness = 1.0;       // gamma shape of the gaps between arrivals
  int max_concurrency = 0;       // requests in flight at most; 0: no limit
  uint64_t seed = 0;             // arrival gaps
  double temperature = 0;
  bool ignore_eos = false;
  nlohmann::json extra_body = nlohmann::json::object();  // merged over every request body
  double request_timeout_s = 3600;  // the longest silence on one connection before the request fails
};

// What is POSTed for `prompt`: streaming with stream_options.include_usage, max_tokens = output_len.
nlohmann::json request_body(const LoadOptions& options, const BenchPrompt& prompt);

// [num_requests] seconds after the start at which each request arrives; nondecreasing, the first 0.
std::vector<double> arrival_offsets(int num_requests, double request_rate, double burstiness, uint64_t seed);

struct LoadRunResult {
  std::vector<RequestOutcome> outcomes;  // [prompts.size()], in prompt order
  double duration_s = 0;                 // first arrival to the last response's end
};
// Called on the client thread after each request ends.
using ProgressFn = std::function<void(int64_t num_done, int64_t num_failed)>;

// Sends every prompt and waits for all of them. Every request ends in an outcome, failed ones with their
// error. Throws std::runtime_error only when the server's host cannot be resolved.
LoadRunResult run_load(const LoadOptions& options, std::span<const BenchPrompt> prompts, const ProgressFn& progress);

// GET {base}/v1/models: the first model's id. Throws std::runtime_error with the reason.
std::string fetch_first_model_id(const LoadOptions& options);

}  // namespace inflight::client

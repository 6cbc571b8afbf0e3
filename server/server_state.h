// What every connection shares: the configuration, the metrics, the model once it is loaded, and the
// shutdown flag.
#pragma once
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>

#include "engine/engine.h"
#include "engine/tokenizer.h"
#include "server/chat_template.h"
#include "server/metrics.h"
#include "server/server_config.h"

namespace inflight::server {

// The loaded model as the routes see it. Immutable once published; outlives every connection.
struct ModelContext {
  std::string served_model_name;   // what clients put in `model`
  std::string model_path;          // also accepted as `model`; empty for the built-in model
  engine::Engine* engine = nullptr;  // submit/cancel/stats are thread-safe
  const engine::Tokenizer* tokenizer = nullptr;
  const ChatTemplate* chat_template = nullptr;
  int max_model_len = 0;           // prompt + generated tokens per sequence
  int vocab_size = 0;
  int64_t created = 0;             // unix seconds of the load, for /v1/models
  std::string kv_cache_dtype;      // its canonical name, e.g. "f16", for /v1/status
  int kv_block_size = 0;           // tokens per KV block
  std::string device = "cpu";      // where the forward pass runs
};

class ServerState {
 public:
  explicit ServerState(ServerConfig config) : config_(std::move(config)) {
    std::random_device rd;
    id_salt_ = (uint64_t(rd()) << 32) ^ rd();
  }

  const ServerConfig& config() const { return config_; }
  Metrics& metrics() { return metrics_; }

  // Null while the model loads. Publishing happens once, after the context is complete.
  const ModelContext* model() const { return model_.load(std::memory_order_acquire); }
  void publish_model(const ModelContext* model) { model_.store(model, std::memory_order_release); }

  // Set on SIGINT/SIGTERM (the drain): new generation requests and /health get 503, and every response
  // closes its connection.
  bool stopping() const { return stopping_.load(); }
  void begin_stopping() { stopping_ = true; }

  // Completion requests accepted and not yet over: from the CompletionJob's construction until its last
  // reference goes, which is after its response is written (or its client is gone). The drain waits for 0.
  int num_jobs_in_flight() const { return num_jobs_in_flight_.load(); }
  void job_started() { num_jobs_in_flight_++; }
  void job_ended() { num_jobs_in_flight_--; }

  // A unique response id such as "cmpl-3f9a0c1e5d7b2a46".
  std::string next_id(const char* prefix) {
    const uint64_t n = next_id_.fetch_add(1);
    // NOTE: a multiplicative mix of a per-process salt, so ids are unique and not guessable in sequence.
    const uint64_t mixed = (n + id_salt_) * 0x9E3779B97F4A7C15ull;
    char buf[40];
    std::snprintf(buf, sizeof buf, "%s-%016llx", prefix, static_cast<unsigned long long>(mixed));
    return buf;
  }

 private:
  ServerConfig config_;
  Metrics metrics_;
  std::atomic<const ModelContext*> model_{nullptr};
  std::atomic<bool> stopping_{false};
  std::atomic<int> num_jobs_in_flight_{0};
  std::atomic<uint64_t> next_id_{1};
  uint64_t id_salt_ = 0;
};

}  // namespace inflight::server

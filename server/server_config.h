// ServerConfig: every setting of `inflight serve`. Defaults here equal configs/server.json; a JSON file
// (--config) overrides them, and command-line flags override the file.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace inflight::server {

struct ServerConfig {
  std::string model;                   // GGUF file or Hugging Face folder; empty: the built-in model
  std::string host = "127.0.0.1";
  int port = 8000;                     // 0: any free port (the start-up log names it)
  std::string served_model_name;       // the `model` clients name; empty: the model's own name
  std::string api_key;                 // empty: no authentication
  int max_num_seqs = 64;               // sequences in one engine step
  int max_num_batched_tokens = 2048;   // tokens in one engine step
  double max_step_ms = 60;             // target step time while sequences decode (prompt chunks cut to fit); 0: off
  std::string prefill_order = "short-first";  // which prompts a step prefills first: fcfs or short-first
  int max_model_len = 0;               // prompt + generated tokens per sequence; 0: the model's context
  int max_queue = 1024;                // requests waiting to start; beyond it: 429 with Retry-After
  std::string kv_cache_dtype = "f16";
  int kv_quant_group = 0;              // int8: channels sharing one scale; 0: the head dim
  double kv_static_amax = 0;           // int8-static, fp8: |K| and |V| of the largest code; 0: calibrate
  std::string kv_cache_memory = "20%"; // cpu: bytes ("512M", "2G", "1073741824") or a share of physical RAM ("20%")
  int kv_block_size = 16;              // tokens per KV block, a power of two
  bool enable_prefix_caching = true;
  bool webui = true;                   // GET / serves the built-in web page (--no-webui: 404)
  std::string device = "auto";         // where the model runs: cpu, cuda, or auto (cuda when a GPU is present)
  double gpu_memory_utilization = 0.9; // cuda: share of the GPU's memory for weights, activations and the KV cache
  int threads = 0;                     // compute threads; 0: all cores
  int http_threads = 2;                // Asio threads serving HTTP
  int max_connections = 512;           // open client connections; beyond it: 503 and closed
  std::string log_level = "info";      // trace, debug, info, warn, error, critical, off
  std::string chat_template = "auto";  // "auto" (the model's own, else llama2), a built-in's name, or a file
  int64_t max_body_bytes = 4 << 20;    // larger request bodies get 413
  int max_header_bytes = 16 << 10;     // larger request headers get 431
  double request_timeout_seconds = 30; // to receive one whole request; also the keep-alive idle limit
  double write_timeout_seconds = 30;   // for each write to a client
  double shutdown_grace_seconds = 25;  // on SIGINT/SIGTERM, time in-flight requests get to finish (below
                                       // docker-compose's stop_grace_period of 30 s)
  int retry_after_seconds = 1;         // the Retry-After of 429 and 503 answers
};

// Overrides the fields of `config` named in `j` (an object). Throws std::invalid_argument naming `where`
// and the key for an unknown key or a value of the wrong type.
void apply_json(const nlohmann::json& j, const std::string& where, ServerConfig* config);
// Reads a JSON config file over the defaults.
ServerConfig load_server_config(const std::string& path);
nlohmann::json to_json(const ServerConfig& config);
// Throws std::invalid_argument naming the first setting out of range.
void validate(const ServerConfig& config);

// "1073741824", "512K", "512M", "2G", "1.5G" (powers of 1024, optional trailing B/iB) or "20%" of
// `physical_bytes`. Throws std::invalid_argument on anything else.
int64_t parse_memory_size(const std::string& text, int64_t physical_bytes);
// Physical RAM, or the memory limit of the process's cgroup (a container's) where that is lower.
int64_t physical_memory_bytes();
// The memory limit under `cgroup_root` (/sys/fs/cgroup: v2 memory.max, or v1 memory/memory.limit_in_bytes);
// 0 when there is none.
int64_t cgroup_memory_limit_bytes(const std::string& cgroup_root);

}  // namespace inflight::server

// `inflight serve`: the OpenAI-compatible HTTP server. Start-up order: listen first, so that /health
// answers 503 while the model loads; then load, size the KV cache, start the engine, publish the model.
// SIGINT/SIGTERM: the drain (new requests and /health get 503), in-flight requests get
// shutdown_grace_seconds to finish, then stop accepting, cancel the rest (they end with an error chunk or a
// 503), wait for their answers to be written, exit 0.
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <ctime>
#include <future>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <spdlog/spdlog.h>

#include "engine/engine.h"
#include "engine/model_loader.h"
#include "kernels/cpu/isa.h"
#include "kernels/kv_dtype.h"
#include "kernels/thread_pool.h"
#include "cli/commands.h"
#include "server/http_server.h"
#include "server/routes.h"
#include "server/server_config.h"
#include "server/server_state.h"

namespace inflight::cli {

namespace {

namespace net = boost::asio;
using server::ServerConfig;

struct ServeFlags {
  std::string config_path;
  ServerConfig values;  // flag values; only the flags given override the config file
  bool no_webui = false;
  std::vector<std::pair<CLI::Option*, void (*)(const ServerConfig&, ServerConfig&)>> overrides;
};

// Everything the loaded model needs, owned together; outlives the HTTP side.
struct ServedModel {
  std::optional<engine::LoadedModel> loaded;  // weights moved into `model`; the tokenizer stays here
  std::unique_ptr<engine::Model> model;
  std::unique_ptr<cache::KvCache> kv;
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<server::ChatTemplate> chat_template;
  server::ModelContext context;
};

std::string format_bytes(int64_t bytes) {
  char buf[32];
  if (bytes >= (int64_t(1) << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", double(bytes) / double(1 << 30));
  else if (bytes >= (int64_t(1) << 20)) std::snprintf(buf, sizeof buf, "%.2f MiB", double(bytes) / double(1 << 20));
  else std::snprintf(buf, sizeof buf, "%lld bytes", static_cast<long long>(bytes));
  return buf;
}

// The chat template the setting chooses; a model template that the Jinja engine cannot parse falls back
// to llama2 with a warning (a template given by name or file must parse).
std::unique_ptr<server::ChatTemplate> make_chat_template(const ServerConfig& config, const engine::LoadedModel& loaded) {
  const server::ChatTemplateSource source = server::choose_chat_template(config.chat_template, loaded.chat_template);
  try {
    auto t = std::make_unique<server::ChatTemplate>(source, loaded.tokenizer);
    spdlog::info("chat template: {}", source.origin);
    return t;
  } catch (const server::jinja::Error& e) {
    if (config.chat_template != "auto") throw std::invalid_argument("chat template (" + source.origin + "): " + e.what());
    spdlog::warn("chat template: the model's template does not parse ({}); using llama2 (set chat_template to choose)",
                 e.what());
    return std::make_unique<server::ChatTemplate>(server::choose_chat_template("llama2", {}), loaded.tokenizer);
  }
}

// `metrics` observe the engine's grammar time per constrained token.
void load(const ServerConfig& config, ServedModel* served, server::Metrics* metrics) {
  if (config.model.empty())
    spdlog::info("no --model given: serving the built-in default model, stories260K (a 260K-parameter model "
                 "that writes short English stories). Serve another with --model path/to/model.gguf or "
                 "--model path/to/hf-folder.");
  served->loaded.emplace(config.model.empty() ? engine::load_builtin_model() : engine::load_model(config.model));
  engine::Device device;
  std::string why;
  if (!engine::resolve_device(config.device, &device, &why)) throw std::invalid_argument(why);
  spdlog::info("device: {} ({})", engine::device_name(device), why);
  served->model = std::make_unique<engine::Model>(std::move(served->loaded->weights), device);
  const engine::ModelConfig& c = served->model->config();
  const bool on_gpu = device == engine::Device::Cuda;

  if (config.max_model_len > c.max_seq_len)
    throw std::invalid_argument("--max-model-len " + std::to_string(config.max_model_len) +
                                " exceeds the model's context of " + std::to_string(c.max_seq_len) + " tokens");
  const int max_model_len = config.max_model_len > 0 ? config.max_model_len : c.max_seq_len;
  kernels::KvDType dtype;
  kernels::parse_kv_dtype(config.kv_cache_dtype, &dtype);  // validated with the config
  cache::KvCacheConfig kv_config{c.num_layers,           c.num_kv_heads, c.head_dim, config.kv_block_size, 0, dtype,
                                 config.kv_quant_group, float(config.kv_static_amax)};
  if (on_gpu) kv_config.device = cache::KvDevice::Cuda;
  if (const std::string err = cache::kv_config_error(kv_config); !err.empty()) throw std::invalid_argument(err);

  // The budget, but no more than max_num_seqs full-length sequences can hold at once. On the GPU (vLLM's
  // rule): gpu_memory_utilization of its memory, less what is in use now (the weights, other processes) and
  // the activations of the largest step.
  int64_t budget = 0;
  std::string budget_setting;
  if (on_gpu) {
    const engine::GpuMemory mem = engine::gpu_memory();
    const int64_t activations = served->model->activation_bytes(config.max_num_batched_tokens, config.max_num_seqs);
    budget = std::max<int64_t>(0, int64_t(double(mem.total) * config.gpu_memory_utilization) -
                                      (mem.total - mem.free) - activations);
    spdlog::info("GPU memory: {} total, {} of weights, {} in use, {} kept for activations; KV budget {}",
                 format_bytes(mem.total), format_bytes(served->model->device_weight_bytes()),
                 format_bytes(mem.total - mem.free), format_bytes(activations), format_bytes(budget));
    budget_setting = "--gpu-memory-utilization " + std::to_string(config.gpu_memory_utilization);
  } else {
    budget = server::parse_memory_size(config.kv_cache_memory, server::physical_memory_bytes());
    budget_setting = "--kv-cache-memory " + config.kv_cache_memory;
  }
  const int64_t blocks_per_seq = (int64_t(max_model_len) + config.kv_block_size - 1) / config.kv_block_size;
  const int64_t useful_blocks = blocks_per_seq * config.max_num_seqs;
  const int64_t budget_blocks = cache::blocks_for_bytes(kv_config, std::min<int64_t>(budget, int64_t(1) << 60));
  kv_config.num_blocks = int(std::min<int64_t>({budget_blocks, useful_blocks, INT32_MAX}));
  if (kv_config.num_blocks < blocks_per_seq)
    throw std::invalid_argument(budget_setting + " (" + format_bytes(budget) + ") holds " +
                                std::to_string(kv_config.num_blocks) + " KV blocks, fewer than the " +
                                std::to_string(blocks_per_seq) + " one sequence of max_model_len " +
                                std::to_string(max_model_len) + " tokens needs; raise it or lower --max-model-len");
  served->kv = std::make_unique<cache::KvCache>(kv_config);
  const cache::KvCache& kv = *served->kv;
  spdlog::info("model {} ({}): {} layers, {} query / {} KV heads, vocab {}; context {} tokens (max_model_len {}); KV cache "
               "{} blocks x {} tokens = {} tokens, {} ({}{})",
               c.name, c.architecture, c.num_layers, c.num_q_heads, c.num_kv_heads, c.vocab_size, c.max_seq_len, max_model_len,
               kv_config.num_blocks, kv_config.block_size, int64_t(kv_config.num_blocks) * kv_config.block_size,
               format_bytes(kv.total_bytes()), kernels::kv_dtype_name(dtype),
               useful_blocks < budget_blocks ? ", capped at max_num_seqs full-length sequences" : "");

  engine::EngineConfig engine_config;
  engine_config.max_num_seqs = config.max_num_seqs;
  engine_config.max_num_batched_tokens = config.max_num_batched_tokens;
  engine_config.max_step_ms = config.max_step_ms;
  engine::parse_prefill_order(config.prefill_order, &engine_config.prefill_order);  // validated with the config
  engine_config.max_model_len = max_model_len;
  engine_config.max_queue = config.max_queue;
  engine_config.enable_prefix_caching = config.enable_prefix_caching;
  engine_config.observe_grammar_time = [metrics](double seconds) { metrics->grammar_token_time.observe(seconds); };
  // NOTE: a test hook: slows every step, so that tests can stop a stream or watch /v1/status mid-generation.
  if (const char* delay = std::getenv("INFLIGHT_DEBUG_STEP_DELAY_MS")) engine_config.debug_step_delay_ms = std::atoi(delay);
  // NOTE: a test hook: the step cost the scheduler plans with ("fixed,prefill_token,decode_seq,attention_kpair"
  // ms), instead of the one learned from measured steps, so that tests of the step budget do not depend on time.
  if (const char* cost = std::getenv("INFLIGHT_DEBUG_STEP_COST")) engine_config.fixed_step_cost = engine::parse_step_cost(cost);
  // NOTE: a test hook: the engine step of this number throws an EngineFault and the engine thread stops.
  if (const char* step = std::getenv("INFLIGHT_DEBUG_ENGINE_FAULT_AT_STEP"))
    engine_config.debug_fault_at_step = std::strtoull(step, nullptr, 10);
  served->engine = std::make_unique<engine::Engine>(*served->model, served->loaded->tokenizer, *served->kv, engine_config);
  served->chat_template = make_chat_template(config, *served->loaded);

  server::ModelContext& ctx = served->context;
  ctx.served_model_name = config.served_model_name.empty() ? c.name : config.served_model_name;
  ctx.model_path = config.model;
  ctx.engine = served->engine.get();
  ctx.tokenizer = &served->loaded->tokenizer;
  ctx.chat_template = served->chat_template.get();
  ctx.max_model_len = served->engine->max_model_len();
  ctx.vocab_size = c.vocab_size;
  ctx.created = int64_t(std::time(nullptr));
  ctx.kv_cache_dtype = kernels::kv_dtype_name(dtype);
  ctx.kv_block_size = kv_config.block_size;
  ctx.device = engine::device_name(device);
}

// Polls `done` every 10 ms until it holds or `seconds` pass.
template <typename Pred>
bool wait_until(Pred done, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(seconds * 1000));
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

void run_serve(ServeFlags& flags) {
  ServerConfig config = flags.config_path.empty() ? ServerConfig{} : server::load_server_config(flags.config_path);
  for (auto& [option, apply] : flags.overrides)
    if (option->count() > 0) apply(flags.values, config);
  server::validate(config);
  spdlog::set_level(spdlog::level::from_str(config.log_level));
  if (config.threads > 0) kernels::set_num_threads(config.threads);
  spdlog::info("compute: {} threads, {} kernels", kernels::compute_pool().num_threads(),
               kernels::cpu::isa_name(kernels::cpu::active_isa()));

  // Declaration order is destruction order reversed: the io_context (and with it every session and job
  // its handlers hold) goes before the model, which goes before the state the sessions point to.
  server::ServerState state(config);
  server::Router router(state);
  ServedModel served;
  net::io_context ioc{config.http_threads};
  server::HttpServer http(ioc, state, router);
  const uint16_t port = http.listen(config.host, uint16_t(config.port));
  spdlog::info("listening on http://{}:{} (loading the model; /health answers 503 until it is ready)", config.host, port);

  std::promise<int> stop_signal;
  std::future<int> stopped = stop_signal.get_future();
  net::signal_set signals(ioc, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int signo) {
    if (!ec) stop_signal.set_value(signo);
  });
  std::vector<std::thread> io_threads;
  for (int i = 0; i < config.http_threads; ++i) io_threads.emplace_back([&ioc] { ioc.run(); });
  auto stop_io = [&] {
    ioc.stop();
    for (std::thread& t : io_threads) t.join();
    io_threads.clear();
  };

  try {
    // NOTE: a test hook: holds the loading state so that tests can see /health answer 503.
    if (const char* delay = std::getenv("INFLIGHT_DEBUG_LOAD_DELAY_MS"))
      wait_until([&] { return stopped.wait_for(std::chrono::seconds(0)) == std::future_status::ready; },
                 std::atof(delay) / 1000.0);
    load(config, &served, &state.metrics());
  } catch (...) {
    stop_io();
    throw;
  }
  state.publish_model(&served.context);
  spdlog::info("ready: serving `{}` on http://{}:{}", served.context.served_model_name, config.host, port);
  if (config.webui) spdlog::info("web page: http://{}:{}/", config.host, port);

  // The drain: keep accepting, but answer 503 (so that a load balancer moves new requests elsewhere) and
  // close each connection after its answer; requests already accepted, queued ones included, finish.
  const int signo = stopped.get();
  state.begin_stopping();
  spdlog::info("received {}: draining: new requests get 503; {} in flight get up to {} s to finish",
               signo == SIGINT ? "SIGINT" : "SIGTERM", state.num_jobs_in_flight(), config.shutdown_grace_seconds);
  const auto drain_start = std::chrono::steady_clock::now();
  if (wait_until([&] { return state.num_jobs_in_flight() == 0; }, config.shutdown_grace_seconds))
    spdlog::info("drained: every in-flight request finished in {:.1f} s",
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - drain_start).count());
  else
    spdlog::warn("shutdown: {} request(s) still running after the {} s grace period; cancelling them",
                 state.num_jobs_in_flight(), config.shutdown_grace_seconds);
  http.stop();
  served.engine->shutdown();  // what is left ends cancelled: an error chunk, or a 503
  if (!wait_until([&] { return http.num_connections() == 0; }, 5.0))
    spdlog::warn("shutdown: {} connection(s) did not close in time", http.num_connections());
  stop_io();
  spdlog::info("shut down");
}

template <auto Field>
void copy_field(const ServerConfig& from, ServerConfig& to) {
  to.*Field = from.*Field;
}

template <auto Field, typename T>
void add_flag_option(CLI::App* cmd, ServeFlags& flags, const std::string& names, T& value, const std::string& help) {
  // The default shown (--help, docs/CONFIGURATION.md) is the setting's own default, read from ServerConfig.
  CLI::Option* opt = cmd->add_option(names, value, help)->capture_default_str();
  flags.overrides.emplace_back(opt, &copy_field<Field>);
}

// Defines serve's flags on `cmd`: each flag that stands for a setting also records how it overrides the
// config file. Shared by the command and serve_config_key_flags().
std::shared_ptr<ServeFlags> define_serve_flags(CLI::App* cmd) {
  auto flags = std::make_shared<ServeFlags>();
  ServerConfig& v = flags->values;
  cmd->add_option("--config", flags->config_path,
                  "JSON config file of settings (keys as in configs/server.json; a key left out keeps its default); "
                  "flags given override it");
  add_flag_option<&ServerConfig::model>(cmd, *flags, "--model,-m", v.model,
                                        "GGUF file or Hugging Face folder (default: the built-in model, stories260K)");
  add_flag_option<&ServerConfig::host>(cmd, *flags, "--host", v.host,
                                       "Address to listen on (0.0.0.0: every interface)");
  add_flag_option<&ServerConfig::port>(cmd, *flags, "--port", v.port,
                                       "TCP port; 0 = any free port (the start-up log names it)");
  add_flag_option<&ServerConfig::served_model_name>(cmd, *flags, "--served-model-name", v.served_model_name,
                                                    "Model name clients use (default: the model's name)");
  add_flag_option<&ServerConfig::api_key>(cmd, *flags, "--api-key", v.api_key,
                                          "Require Authorization: Bearer <key> on /v1/* (default: none)");
  CLI::Option* no_webui = cmd->add_flag("--no-webui", flags->no_webui,
                                        "Do not serve the built-in web page at GET / (it answers 404)");
  flags->overrides.emplace_back(no_webui, [](const ServerConfig&, ServerConfig& to) { to.webui = false; });
  add_flag_option<&ServerConfig::max_num_seqs>(cmd, *flags, "--max-num-seqs", v.max_num_seqs,
                                               "Sequences in one engine step (the batch)");
  add_flag_option<&ServerConfig::max_num_batched_tokens>(cmd, *flags, "--max-num-batched-tokens",
                                                         v.max_num_batched_tokens,
                                                         "Tokens in one engine step: prompt chunks and decoded tokens");
  add_flag_option<&ServerConfig::max_step_ms>(cmd, *flags, "--max-step-ms", v.max_step_ms,
                                              "Target ms of a step while sequences decode: prompt chunks are cut to "
                                              "fit (0 = off)");
  add_flag_option<&ServerConfig::prefill_order>(cmd, *flags, "--prefill-order", v.prefill_order,
                                                "Which prompts a step prefills first: fcfs, or short-first (the "
                                                "shortest remaining first; the oldest still moves every step)");
  add_flag_option<&ServerConfig::max_model_len>(cmd, *flags, "--max-model-len", v.max_model_len,
                                                "Prompt + generated tokens per sequence (0 = the model's context)");
  add_flag_option<&ServerConfig::kv_cache_dtype>(cmd, *flags, "--kv-cache-dtype", v.kv_cache_dtype,
                                                 "KV cache storage: " + std::string(kernels::kv_dtype_names()) +
                                                     "; int8 has a scale per token, head and group, int8-static "
                                                     "and fp8 per-tensor scales");
  add_flag_option<&ServerConfig::kv_quant_group>(cmd, *flags, "--kv-quant-group", v.kv_quant_group,
                                                 "int8 KV: channels sharing one scale, >= 8 and dividing the head dim "
                                                 "(0 = the head dim)");
  add_flag_option<&ServerConfig::kv_static_amax>(cmd, *flags, "--kv-static-amax", v.kv_static_amax,
                                                 "int8-static / fp8 KV: the |K| and |V| mapped to the largest code "
                                                 "(0 = calibrate each layer from the first prefill)");
  add_flag_option<&ServerConfig::kv_cache_memory>(cmd, *flags, "--kv-cache-memory", v.kv_cache_memory,
                                                  "cpu: KV cache size, bytes (512M, 2G) or a share of RAM (20%), "
                                                  "at most what --max-num-seqs full-length sequences use");
  add_flag_option<&ServerConfig::kv_block_size>(cmd, *flags, "--kv-block-size", v.kv_block_size,
                                                "Tokens per KV cache block, a power of two");
  add_flag_option<&ServerConfig::device>(cmd, *flags, "--device", v.device,
                                         "Where the model runs: cpu, cuda (an NVIDIA GPU), or auto (cuda when one is "
                                         "present)");
  add_flag_option<&ServerConfig::gpu_memory_utilization>(
      cmd, *flags, "--gpu-memory-utilization", v.gpu_memory_utilization,
      "cuda: share of the GPU's memory for the weights, the activations and the KV cache, which gets what is "
      "left");
  add_flag_option<&ServerConfig::threads>(cmd, *flags, "--threads,-t", v.threads,
                                          "Compute threads; 0 = $INFLIGHT_NUM_THREADS if set, else all cores");
  add_flag_option<&ServerConfig::http_threads>(cmd, *flags, "--http-threads", v.http_threads,
                                               "Threads serving HTTP");
  add_flag_option<&ServerConfig::max_connections>(cmd, *flags, "--max-connections", v.max_connections,
                                                  "Open client connections; beyond it new ones get 503 and are "
                                                  "closed");
  add_flag_option<&ServerConfig::max_queue>(cmd, *flags, "--max-queue", v.max_queue,
                                            "Requests waiting to start before new ones get 429 with Retry-After");
  add_flag_option<&ServerConfig::log_level>(cmd, *flags, "--log-level", v.log_level,
                                            "Log level: trace, debug, info, warn, error, critical, off");
  add_flag_option<&ServerConfig::shutdown_grace_seconds>(
      cmd, *flags, "--shutdown-grace-seconds", v.shutdown_grace_seconds,
      "On SIGINT/SIGTERM, seconds in-flight requests get to finish while new ones get 503");
  add_flag_option<&ServerConfig::chat_template>(cmd, *flags, "--chat-template", v.chat_template,
                                                "auto (the model's own, else llama2), a built-in (" +
                                                    server::chat_template_names() + "), or a Jinja template file");
  return flags;
}

}  // namespace

void add_serve_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("serve", "Serve the OpenAI-compatible HTTP API");
  const std::shared_ptr<ServeFlags> flags = define_serve_flags(cmd);
  cmd->callback([flags] { run_serve(*flags); });
}

std::vector<std::pair<std::string, std::string>> serve_config_key_flags() {
  CLI::App scratch;
  const std::shared_ptr<ServeFlags> flags = define_serve_flags(&scratch);
  // A config in which every setting differs from its default: a flag's override copied from it onto the
  // defaults then changes exactly the settings that flag stands for.
  const nlohmann::json defaults = server::to_json(ServerConfig{});
  nlohmann::json changed = defaults;
  for (auto& [key, value] : changed.items()) {
    if (value.is_boolean()) value = !value.get<bool>();
    else if (value.is_string()) value = value.get<std::string>() + "x";
    else if (value.is_number_integer()) value = value.get<int64_t>() + 1;
    else value = value.get<double>() + 1;
  }
  ServerConfig from;
  server::apply_json(changed, "every setting changed", &from);
  std::vector<std::pair<std::string, std::string>> key_flags;
  for (auto& [key, value] : defaults.items()) key_flags.emplace_back(key, "");
  for (const auto& [option, apply] : flags->overrides) {
    ServerConfig to;
    apply(from, to);
    const nlohmann::json after = server::to_json(to);
    for (auto& [key, flag] : key_flags)
      if (after[key] != defaults[key]) flag = option->get_name();
  }
  return key_flags;
}

}  // namespace inflight::cli

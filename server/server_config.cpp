#include "server/server_config.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <system_error>

#include "engine/prefill_order.h"
#include "kernels/kv_dtype.h"
#include "server/chat_template.h"

namespace inflight::server {

using nlohmann::json;

namespace {

// One entry per setting: its JSON key and how to read and write it. The one list both directions use,
// so a setting cannot be readable but missing from to_json() or the reverse.
template <typename Fn>
void for_each_field(ServerConfig& c, Fn&& fn) {
  fn("model", c.model);
  fn("host", c.host);
  fn("port", c.port);
  fn("served_model_name", c.served_model_name);
  fn("api_key", c.api_key);
  fn("max_num_seqs", c.max_num_seqs);
  fn("max_num_batched_tokens", c.max_num_batched_tokens);
  fn("max_step_ms", c.max_step_ms);
  fn("prefill_order", c.prefill_order);
  fn("max_model_len", c.max_model_len);
  fn("max_queue", c.max_queue);
  fn("kv_cache_dtype", c.kv_cache_dtype);
  fn("kv_quant_group", c.kv_quant_group);
  fn("kv_static_amax", c.kv_static_amax);
  fn("kv_cache_memory", c.kv_cache_memory);
  fn("kv_block_size", c.kv_block_size);
  fn("enable_prefix_caching", c.enable_prefix_caching);
  fn("webui", c.webui);
  fn("device", c.device);
  fn("gpu_memory_utilization", c.gpu_memory_utilization);
  fn("threads", c.threads);
  fn("http_threads", c.http_threads);
  fn("max_connections", c.max_connections);
  fn("log_level", c.log_level);
  fn("chat_template", c.chat_template);
  fn("max_body_bytes", c.max_body_bytes);
  fn("max_header_bytes", c.max_header_bytes);
  fn("request_timeout_seconds", c.request_timeout_seconds);
  fn("write_timeout_seconds", c.write_timeout_seconds);
  fn("shutdown_grace_seconds", c.shutdown_grace_seconds);
  fn("retry_after_seconds", c.retry_after_seconds);
}

[[noreturn]] void bad_key(const std::string& where, const std::string& key, const std::string& what) {
  throw std::invalid_argument(where + ": key \"" + key + "\" " + what);
}

template <typename T>
void read_value(const json& v, const std::string& where, const std::string& key, T& out) {
  if constexpr (std::is_same_v<T, std::string>) {
    if (!v.is_string()) bad_key(where, key, "must be a string");
    out = v.get<std::string>();
  } else if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) bad_key(where, key, "must be true or false");
    out = v.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    if (!v.is_number_integer()) bad_key(where, key, "must be an integer");
    const int64_t x = v.get<int64_t>();
    if (x < int64_t(std::numeric_limits<T>::min()) || x > int64_t(std::numeric_limits<T>::max()))
      bad_key(where, key, "is out of range");
    out = T(x);
  } else {
    if (!v.is_number()) bad_key(where, key, "must be a number");
    out = v.get<T>();
  }
}

}  // namespace

void apply_json(const json& j, const std::string& where, ServerConfig* config) {
  if (!j.is_object()) throw std::invalid_argument(where + ": a server config must be a JSON object");
  size_t num_known = 0;
  for_each_field(*config, [&](const char* key, auto& field) {
    auto it = j.find(key);
    if (it == j.end()) return;
    ++num_known;
    read_value(*it, where, key, field);
  });
  if (num_known == j.size()) return;
  ServerConfig probe;
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool known = false;
    for_each_field(probe, [&](const char* key, auto&) { known |= it.key() == key; });
    if (!known) bad_key(where, it.key(), "is not a server setting");
  }
}

ServerConfig load_server_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument(path + ": cannot open the config file");
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw std::invalid_argument(path + ": bad JSON: " + e.what());
  }
  ServerConfig config;
  apply_json(j, path, &config);
  return config;
}

json to_json(const ServerConfig& config) {
  json j = json::object();
  ServerConfig copy = config;
  for_each_field(copy, [&](const char* key, auto& field) { j[key] = field; });
  return j;
}

void validate(const ServerConfig& c) {
  auto require = [](bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument(what);
  };
  require(c.port >= 0 && c.port <= 65535, "port must be in [0, 65535], got " + std::to_string(c.port));
  require(c.max_num_seqs >= 1, "max_num_seqs must be at least 1");
  require(c.max_num_batched_tokens >= 1, "max_num_batched_tokens must be at least 1");
  require(c.max_step_ms >= 0 && std::isfinite(c.max_step_ms), "max_step_ms must be a finite number >= 0 (0: off)");
  engine::PrefillOrder order;
  require(engine::parse_prefill_order(c.prefill_order, &order),
          "prefill_order must be one of " + engine::prefill_order_names() + ", got '" + c.prefill_order + "'");
  require(c.max_model_len >= 0, "max_model_len must be >= 0 (0: the model's context)");
  require(c.max_queue >= 1, "max_queue must be at least 1");
  kernels::KvDType dtype;
  require(kernels::parse_kv_dtype(c.kv_cache_dtype, &dtype), "kv_cache_dtype: unknown KV cache dtype '" +
                                                                 c.kv_cache_dtype + "' (" +
                                                                 std::string(kernels::kv_dtype_names()) + ")");
  require(c.kv_quant_group >= 0, "kv_quant_group must be >= 0 (0: the head dim)");
  require(c.kv_static_amax >= 0 && std::isfinite(c.kv_static_amax),
          "kv_static_amax must be a finite number >= 0 (0: calibrate from the first prefill)");
  require(c.kv_block_size > 0 && (c.kv_block_size & (c.kv_block_size - 1)) == 0,
          "kv_block_size must be a power of two, got " + std::to_string(c.kv_block_size));
  parse_memory_size(c.kv_cache_memory, int64_t(1) << 30);
  require(c.device == "auto" || c.device == "cpu" || c.device == "cuda",
          "device must be one of auto, cpu, cuda, got '" + c.device + "'");
  require(c.gpu_memory_utilization > 0 && c.gpu_memory_utilization <= 1,
          "gpu_memory_utilization must be in (0, 1]");
  require(c.threads >= 0, "threads must be >= 0 (0: all cores)");
  require(c.http_threads >= 1 && c.http_threads <= 256, "http_threads must be in [1, 256]");
  require(c.max_connections >= 1, "max_connections must be at least 1");
  static const char* kLevels[] = {"trace", "debug", "info", "warn", "error", "critical", "off"};
  require(std::find(std::begin(kLevels), std::end(kLevels), c.log_level) != std::end(kLevels),
          "log_level must be one of trace, debug, info, warn, error, critical, off");
  std::error_code ec;  // a name the file system cannot take (too long, say) is no file either, not an exception
  require(c.chat_template == "auto" || builtin_chat_template(c.chat_template) ||
              std::filesystem::is_regular_file(c.chat_template, ec),
          "chat_template must be auto, one of " + chat_template_names() + ", or a Jinja template file; got '" +
              c.chat_template + "' (no such file)");
  require(c.max_body_bytes >= 1024, "max_body_bytes must be at least 1024");
  require(c.max_header_bytes >= 1024, "max_header_bytes must be at least 1024");
  require(c.request_timeout_seconds > 0, "request_timeout_seconds must be > 0");
  require(c.write_timeout_seconds > 0, "write_timeout_seconds must be > 0");
  require(c.shutdown_grace_seconds >= 0, "shutdown_grace_seconds must be >= 0");
  require(c.retry_after_seconds >= 0, "retry_after_seconds must be >= 0");
}

int64_t parse_memory_size(const std::string& text, int64_t physical_bytes) {
  const auto fail = [&] {
    throw std::invalid_argument("kv_cache_memory: '" + text +
                                "' is not a size (bytes, or with a K/M/G/T suffix, or a percentage like 20%)");
  };
  size_t end = 0;
  double value = 0;
  try {
    value = std::stod(text, &end);
  } catch (const std::exception&) {
    fail();
  }
  if (!(value > 0) || !std::isfinite(value)) fail();
  std::string suffix = text.substr(end);
  for (char& ch : suffix) ch = char(std::toupper(static_cast<unsigned char>(ch)));
  double bytes = 0;
  if (suffix == "%") {
    if (value > 100) fail();
    bytes = double(physical_bytes) * value / 100.0;
  } else {
    if (suffix.size() >= 2 && suffix.substr(suffix.size() - 2) == "IB") suffix.resize(suffix.size() - 2);
    else if (suffix.size() >= 2 && suffix.back() == 'B') suffix.pop_back();
    static const std::pair<const char*, double> kUnits[] = {
        {"", 1.0}, {"B", 1.0}, {"K", 0x1p10}, {"M", 0x1p20}, {"G", 0x1p30}, {"T", 0x1p40}};
    bool found = false;
    for (auto [name, scale] : kUnits)
      if (suffix == name) {
        bytes = value * scale;
        found = true;
      }
    if (!found) fail();
  }
  if (bytes < 1 || bytes > 0x1p62) fail();
  return int64_t(bytes);
}

int64_t cgroup_memory_limit_bytes(const std::string& cgroup_root) {
  // cgroup v2, then v1. "max" (v2) and v1's page-rounded INT64_MAX mean no limit.
  for (const char* file : {"/memory.max", "/memory/memory.limit_in_bytes"}) {
    std::ifstream in(cgroup_root + file);
    std::string text;
    if (!(in >> text)) continue;
    try {
      size_t used = 0;
      const long long bytes = std::stoll(text, &used);
      if (used == text.size() && bytes > 0 && bytes < (1LL << 60)) return bytes;
    } catch (const std::exception&) {  // "max"
    }
    return 0;
  }
  return 0;
}

int64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  const int64_t host = pages > 0 && page_size > 0 ? int64_t(pages) * page_size : int64_t(8) << 30;  // unknown: 8 GiB
  const int64_t limit = cgroup_memory_limit_bytes("/sys/fs/cgroup");
  return limit > 0 ? std::min(host, limit) : host;
}

}  // namespace inflight::server

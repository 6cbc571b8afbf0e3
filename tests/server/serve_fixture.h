// The server most end-to-end tests share (stories260K, started once per test run), the golden cases,
// and JSON request helpers.
#pragma once
#include <doctest/doctest.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cache/kv_cache.h"
#include "engine/generator.h"
#include "engine/model_loader.h"
#include "http_test_client.h"
#include "server_process.h"
#include "test_support.h"

namespace inflight::test {

using nlohmann::json;

// stories260K on the default settings, with a small KV cache; shared by every test of the run.
inline ServerProcess& stories_server() {
  static std::unique_ptr<ServerProcess> server = [] {
    auto s = std::make_unique<ServerProcess>(std::vector<std::string>{"--model", stories_gguf(), "--kv-cache-memory", "64M"});
    REQUIRE_MESSAGE(s->wait_ready(), s->log());
    return s;
  }();
  return *server;
}

// The greedy continuation of `ids` by stories260K computed in-process by the reference generator (no
// server), over a KV cache of `dtype` (static amax `kv_static_amax`, 0: calibrated).
inline std::string offline_greedy_text(const std::vector<int32_t>& ids, int max_tokens,
                                       kernels::KvDType dtype = kernels::KvDType::F32, float kv_static_amax = 0.0f) {
  static engine::LoadedModel loaded = engine::load_model(stories_gguf());
  static engine::Model model(std::move(loaded.weights));
  const auto& c = model.config();
  cache::KvCache kv({c.num_layers, c.num_kv_heads, c.head_dim, 16, 64, dtype, 0, kv_static_amax});
  engine::GenerateOptions o;
  o.max_tokens = max_tokens;
  o.sampling.temperature = 0.0f;
  o.stop_at_eos = false;
  return engine::generate(model, kv, loaded.tokenizer, ids, o).text;
}

struct GoldenCase {
  std::string prompt;
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> generated_ids;
  std::string generated_text;
};

inline std::vector<GoldenCase> golden_cases() {
  const std::filesystem::path path = data_path("golden/stories260K_greedy.json");
  std::ifstream in(path);
  REQUIRE_MESSAGE(in, "cannot open golden file " << path.string());
  const json j = json::parse(in);
  std::vector<GoldenCase> cases;
  for (const json& c : j["cases"])
    cases.push_back({c["prompt"], c["prompt_token_ids"], c["generated_token_ids"], c["generated_text"]});
  return cases;
}

struct JsonResult {
  int status = 0;
  json body;
  HttpResult http;
};

inline JsonResult post_json(uint16_t port, const std::string& target, const json& body, const std::string& headers = {}) {
  JsonResult r;
  r.http = http_request(port, "POST", target, body.dump(), headers);
  r.status = r.http.status;
  r.body = json::parse(r.http.body, nullptr, false);
  return r;
}

// A streamed request: every chunk (as JSON) before [DONE], and whether [DONE] came last.
struct StreamResult {
  int status = 0;
  std::string content_type;
  std::vector<json> chunks;
  bool done = false;
};

inline StreamResult post_stream(uint16_t port, const std::string& target, json body) {
  body["stream"] = true;
  const HttpResult http = http_request(port, "POST", target, body.dump());
  StreamResult r;
  r.status = http.status;
  r.content_type = http.header("content-type");
  const std::vector<std::string> events = sse_events(http.body);
  for (size_t i = 0; i < events.size(); ++i) {
    if (events[i] == "[DONE]") {
      r.done = i + 1 == events.size();
      break;
    }
    r.chunks.push_back(json::parse(events[i], nullptr, false));
  }
  return r;
}

// Concatenated text of choice `index` of a completions (text) or chat (delta.content) stream.
inline std::string stream_text(const StreamResult& r, int index = 0) {
  std::string text;
  for (const json& chunk : r.chunks)
    for (const json& choice : chunk.value("choices", json::array())) {
      if (choice["index"] != index) continue;
      if (choice.contains("text")) text += choice["text"].get<std::string>();
      else if (choice.contains("delta") && choice["delta"].contains("content"))
        text += choice["delta"]["content"].get<std::string>();
    }
  return text;
}

// Checks the OpenAI error envelope: {"error": {"message", "type", "param", "code"}}.
inline void check_error_envelope(const json& body) {
  REQUIRE(body.is_object());
  REQUIRE(body.contains("error"));
  const json& e = body["error"];
  CHECK(e["message"].is_string());
  CHECK(!e["message"].get<std::string>().empty());
  CHECK(e["type"].is_string());
  CHECK(e.contains("param"));
  CHECK(e.contains("code"));
}

// The value of an unlabelled sample in a Prometheus exposition, or -1.
inline double metric_value(const std::string& text, const std::string& name) {
  const std::string key = "\n" + name + " ";
  const size_t pos = text.find(key);
  if (pos == std::string::npos) return -1;
  return std::stod(text.substr(pos + key.size()));
}

}  // namespace inflight::test

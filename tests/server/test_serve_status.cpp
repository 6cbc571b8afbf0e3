// GET /v1/status and GET / on `inflight serve` with stories260K: the live engine state while a stream
// runs (blocks in use, prompt blocks shared by two samples, generation steps) and once it is cancelled
// (all back to 0); the web page's files with their Content-Types; --no-webui.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "serve_fixture.h"

using namespace inflight;
using namespace inflight::test;

namespace {

const std::string kKey = "status-test-key-3c1f";
const std::string kAuth = "Authorization: Bearer " + kKey + "\r\n";

json get_status(uint16_t port) {
  const HttpResult r = http_request(port, "GET", "/v1/status", "", kAuth);
  REQUIRE(r.status == 200);
  CHECK(r.header("content-type") == "application/json");
  return json::parse(r.body);
}

// Polls /v1/status until `done(status)` or `timeout_s`; returns the last status.
template <typename Pred>
json wait_status(uint16_t port, Pred done, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(timeout_s * 1000));
  json s = get_status(port);
  while (!done(s) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    s = get_status(port);
  }
  return s;
}

long count_of(const json& status, char state) {
  const std::string map = status["kv_cache"]["block_states"];
  return long(std::count(map.begin(), map.end(), state));
}

std::string source_file(const std::string& relative) {
  std::ifstream in(std::filesystem::path(INFLIGHT_SOURCE_DIR) / relative, std::ios::binary);
  REQUIRE(in);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_SUITE("serve status") {
  TEST_CASE("/v1/status: blocks in use, shared prompt blocks and generation steps mid-stream; 0 after cancelling") {
    ServerProcess server({"--model", stories_gguf(), "--kv-cache-memory", "16M", "--api-key", kKey},
                         {"INFLIGHT_DEBUG_STEP_DELAY_MS=10"});
    REQUIRE_MESSAGE(server.wait_ready(), server.log());
    const uint16_t port = server.port();

    const HttpResult no_key = http_request(port, "GET", "/v1/status");
    CHECK(no_key.status == 401);
    check_error_envelope(json::parse(no_key.body));

    const json idle = get_status(port);
    CHECK(idle["object"] == "server.status");
    CHECK(idle["model"] == "stories260K");
    CHECK(idle["device"] == test_device());
    CHECK(idle["kv_cache_dtype"] == "f16");
    CHECK(idle["kv_block_size"] == 16);
    CHECK(idle["max_model_len"] == 512);
    CHECK(idle["requests"]["running"] == 0);
    CHECK(idle["requests"]["waiting"] == 0);
    const int total = idle["kv_cache"]["blocks_total"];
    CHECK(total > 0);
    CHECK(idle["kv_cache"]["block_states"] == std::string(size_t(total), '0'));
    CHECK(idle["kv_cache"]["blocks_used"] == 0);
    CHECK(idle["kv_cache"]["blocks_free"] == total);
    CHECK(idle["steps"].empty());
    CHECK(idle["counters"]["steps"] == 0);

    // Two samples of a 26-token prompt share its blocks; at 10 ms a step the stream lasts seconds.
    Connection c(port);
    const json body = {{"prompt", "The sun was shining and the birds were singing. Ben wanted to go outside and play"},
                       {"max_tokens", 400}, {"n", 2}, {"ignore_eos", true}, {"temperature", 0.8}, {"stream", true}};
    c.send_all(format_request("POST", "/v1/completions", body.dump(), kAuth));
    std::string received;
    while (received.find("data: ") == std::string::npos) {
      const std::string more = c.recv_some();
      REQUIRE(!more.empty());
      received += more;
    }
    const json busy = wait_status(port, [](const json& s) {
      return s["requests"]["running"] == 1 && s["last_second"]["generation_tokens"] > 0 &&
             s["kv_cache"]["blocks_shared"] > 0;
    }, 10.0);
    CHECK(busy["requests"]["running"] == 1);
    CHECK(busy["kv_cache"]["blocks_used"] > 0);
    CHECK(busy["kv_cache"]["blocks_shared"] > 0);
    CHECK(busy["kv_cache"]["blocks_used"] == count_of(busy, '1') + count_of(busy, '3'));
    CHECK(busy["kv_cache"]["blocks_shared"] == count_of(busy, '3'));
    CHECK(busy["kv_cache"]["usage"] > 0.0);
    CHECK(busy["last_second"]["steps"] > 0);
    CHECK(busy["throughput"]["generation_tokens_per_second"] > 0.0);
    const json& steps = busy["steps"];
    REQUIRE(steps.size() >= 2);
    CHECK(steps[0]["step"] == 1);
    CHECK(steps[0]["context_tokens"] == busy["counters"]["prompt_tokens"]);  // the prompt, once
    CHECK(steps[0]["context_seqs"] == 1);
    const json& last = steps.back();
    CHECK(last["generation_tokens"] == 2);  // one per sample
    CHECK(last["generation_seqs"] == 2);
    CHECK(last["context_tokens"] == 0);
    CHECK(last["duration_ms"] > 0.0);
    CHECK(last["kv_blocks_used"] > 0);

    c.close();  // the client leaves: the request is cancelled
    const json after = wait_status(port, [](const json& s) {
      return s["requests"]["running"] == 0 && s["kv_cache"]["blocks_used"] == 0 && s["last_second"]["steps"] == 0;
    }, 10.0);
    CHECK(after["requests"]["running"] == 0);
    CHECK(after["kv_cache"]["blocks_used"] == 0);
    CHECK(count_of(after, '1') + count_of(after, '3') == 0);
    CHECK(after["kv_cache"]["blocks_cached"] == count_of(after, '2'));
    CHECK(after["last_second"]["generation_tokens"] == 0);
    CHECK(after["counters"]["requests_finished"]["cancelled"] == 2);  // per choice, as /metrics counts them
    CHECK(after["counters"]["generation_tokens"] > 2);
  }

  TEST_CASE("GET / serves the page and its files with their Content-Types; the page carries no key") {
    ServerProcess server({"--model", stories_gguf(), "--kv-cache-memory", "16M", "--api-key", kKey});
    REQUIRE_MESSAGE(server.wait_ready(), server.log());
    const uint16_t port = server.port();
    struct File {
      std::string path, source, type;
    };
    for (const File& f : {File{"/", "server/webui/index.html", "text/html; charset=utf-8"},
                          File{"/webui/app.js", "server/webui/app.js", "text/javascript; charset=utf-8"},
                          File{"/webui/style.css", "server/webui/style.css", "text/css; charset=utf-8"}}) {
      CAPTURE(f.path);
      const HttpResult r = http_request(port, "GET", f.path);  // no key: the page itself is open
      CHECK(r.status == 200);
      CHECK(r.header("content-type") == f.type);
      CHECK(r.header("x-content-type-options") == "nosniff");
      CHECK(r.header("content-security-policy").find("default-src 'self'") != std::string::npos);
      CHECK(r.body == source_file(f.source));
      CHECK(r.body.find(kKey) == std::string::npos);
    }
    const HttpResult missing = http_request(port, "GET", "/webui/nothing.js");
    CHECK(missing.status == 404);
    check_error_envelope(json::parse(missing.body));
    CHECK(http_request(port, "POST", "/", "{}").status == 405);
  }

  TEST_CASE("--no-webui (or \"webui\": false): GET / is a 404 JSON error; the API and /v1/status stay") {
    TempDir dir("webui-config");
    const std::string config = (dir.path / "server.json").string();
    std::ofstream(config) << R"({"webui": false})";
    for (const std::vector<std::string>& off : {std::vector<std::string>{"--no-webui"}, {"--config", config}}) {
      CAPTURE(off[0]);
      std::vector<std::string> args = {"--model", stories_gguf(), "--kv-cache-memory", "16M"};
      args.insert(args.end(), off.begin(), off.end());
      ServerProcess server(args);
      REQUIRE_MESSAGE(server.wait_ready(), server.log());
      const uint16_t port = server.port();
      for (const char* path : {"/", "/webui/app.js"}) {
        CAPTURE(path);
        const HttpResult r = http_request(port, "GET", path);
        CHECK(r.status == 404);
        CHECK(r.header("content-type") == "application/json");
        check_error_envelope(json::parse(r.body));
      }
      CHECK(http_request(port, "GET", "/v1/status").status == 200);
      CHECK(http_request(port, "GET", "/health").status == 200);
      CHECK(server.log().find("web page:") == std::string::npos);
    }
  }
}

// `inflight serve` under faults and limits: the engine thread dying mid-stream (the test hook
// INFLIGHT_DEBUG_ENGINE_FAULT_AT_STEP), more connections than --max-connections, request bytes that would
// forge or garble log lines, and the model file truncated and rewritten under the running server.
#include <doctest/doctest.h>

#include <filesystem>
#include <memory>
#include <thread>

#include "serve_fixture.h"

using namespace inflight::test;

namespace {

bool poll_until(const std::function<bool()>& done, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(timeout_s * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return done();
}

}  // namespace

TEST_SUITE("serve faults") {
  TEST_CASE("the engine thread dies mid-stream: the stream ends with an error chunk, then /health and the API give 503") {
    ServerProcess server({"--model", stories_gguf(), "--kv-cache-memory", "16M"},
                         {"INFLIGHT_DEBUG_ENGINE_FAULT_AT_STEP=6"});
    REQUIRE_MESSAGE(server.wait_ready(), server.log());
    const uint16_t port = server.port();

    const StreamResult s = post_stream(port, "/v1/completions",
                                       {{"prompt", "Once upon a time"}, {"max_tokens", 200}, {"ignore_eos", true}, {"temperature", 0}});
    CHECK(s.status == 200);
    CHECK(s.done);  // [DONE] still ends the stream
    REQUIRE_FALSE(s.chunks.empty());
    const json& last = s.chunks.back();
    REQUIRE_MESSAGE(last.contains("error"), last.dump());
    CHECK(last["error"]["code"] == "engine_dead");
    CHECK(last["error"]["message"].get<std::string>().find("engine fault") != std::string::npos);
    CHECK(s.chunks.size() < 200);

    const HttpResult health = http_request(port, "GET", "/health");
    CHECK(health.status == 503);
    CHECK(health.header("retry-after") == "1");
    CHECK(json::parse(health.body)["error"]["code"] == "engine_dead");
    const JsonResult again = post_json(port, "/v1/completions", {{"prompt", "The cat"}, {"max_tokens", 4}});
    CHECK(again.status == 503);
    CHECK(again.body["error"]["code"] == "engine_dead");
    const JsonResult chat = post_json(port, "/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "hi"}}}}});
    CHECK(chat.status == 503);
    CHECK(server.log().find("engine fault") != std::string::npos);
    // The HTTP side stays up (answers, no crash); SIGTERM still ends it cleanly.
    server.signal(SIGTERM);
    CHECK(server.wait_exit(20) == std::optional<int>(0));
  }

  TEST_CASE("--max-connections: a connection over the limit gets a 503 JSON and is closed; freed slots serve again") {
    ServerProcess server({"--model", stories_gguf(), "--kv-cache-memory", "16M", "--max-connections", "3"});
    REQUIRE_MESSAGE(server.wait_ready(), server.log());
    const uint16_t port = server.port();
    // wait_ready's connections are closed by now, but the server may not have seen it yet.
    std::vector<std::unique_ptr<Connection>> held;
    for (int i = 0; i < 3; ++i) {
      bool ok = poll_until([&] {
        auto c = std::make_unique<Connection>(port, 10);
        c->send_all(format_request("GET", "/health", ""));
        if (c->read_response().status != 200) return false;
        held.push_back(std::move(c));
        return true;
      }, 10);
      REQUIRE(ok);
    }
    {
      Connection over(port, 10);
      over.send_all(format_request("GET", "/health", ""));
      const HttpResult r = over.read_response();
      CHECK(r.status == 503);
      CHECK(r.header("retry-after") == "1");
      check_error_envelope(json::parse(r.body));
      CHECK(json::parse(r.body)["error"]["code"] == "too_many_connections");
      CHECK(over.closed_by_peer_within(5000));
    }
    // A burst far over the limit: every connection is answered 503 or closed, none hangs.
    {
      std::vector<std::unique_ptr<Connection>> burst;
      for (int i = 0; i < 100; ++i) {
        burst.push_back(std::make_unique<Connection>(port, 10));
        burst.back()->send_all(format_request("GET", "/health", ""));
      }
      int num_503 = 0;
      for (auto& c : burst) num_503 += c->read_response().status == 503;
      CHECK(num_503 >= 60);  // kMaxRefusing answer at once; the rest may be closed unanswered
    }
    // The held connections still work (keep-alive), and closing one frees a slot.
    held[0]->send_all(format_request("GET", "/health", ""));
    CHECK(held[0]->read_response().status == 200);
    held.pop_back();
    CHECK(poll_until([&] { return http_request(port, "GET", "/health").status == 200; }, 10));
    held.clear();
    const JsonResult r = post_json(port, "/v1/completions", {{"prompt", "The cat"}, {"max_tokens", 4}});
    CHECK(r.status == 200);
    const std::string metrics = http_request(port, "GET", "/metrics").body;
    CHECK(metrics.find("code=\"503\"") != std::string::npos);
  }

  TEST_CASE("control characters and invalid UTF-8 in a request target are escaped in the access log") {
    ServerProcess server({"--model", stories_gguf(), "--kv-cache-memory", "16M"});
    REQUIRE_MESSAGE(server.wait_ready(), server.log());
    const uint16_t port = server.port();
    // Beast refuses ASCII controls in a target; C1 controls (as UTF-8), bidi overrides and bytes that
    // are not UTF-8 pass its parser and reach the router.
    const std::string target = "/v1/x\xC2\x9B" "2J\xE2\x80\xAE\xFF";
    const HttpResult r = http_request(port, "GET", target);
    CHECK(r.status == 404);
    const std::string escaped = "GET /v1/x\\u{009B}2J\\u{202E}\\xFF";
    CHECK(poll_until([&] { return server.log().find(escaped) != std::string::npos; }, 5));
    const std::string log = server.log();
    CHECK(log.find("\xC2\x9B") == std::string::npos);
    CHECK(log.find("\xE2\x80\xAE") == std::string::npos);
    CHECK(log.find('\xFF') == std::string::npos);
  }

  TEST_CASE("the model file truncated, then rewritten with zeros, under the running server: no SIGBUS, same text") {
    TempDir dir("model-copy");
    const std::string model = dir / "stories260K.gguf";
    std::filesystem::copy_file(stories_gguf(), model);
    const auto size = std::filesystem::file_size(model);
    ServerProcess server({"--model", model, "--kv-cache-memory", "16M"});
    REQUIRE_MESSAGE(server.wait_ready(), server.log());
    const uint16_t port = server.port();
    const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 24}, {"temperature", 0}, {"ignore_eos", true}};
    const JsonResult before = post_json(port, "/v1/completions", body);
    REQUIRE(before.status == 200);
    const std::string text = before.body["choices"][0]["text"];

    std::filesystem::resize_file(model, 64);
    const JsonResult truncated = post_json(port, "/v1/completions", body);
    CHECK(truncated.status == 200);
    CHECK(truncated.body["choices"][0]["text"] == text);
    std::filesystem::resize_file(model, size);  // the tail comes back as zeros
    const JsonResult zeroed = post_json(port, "/v1/completions", body);
    CHECK(zeroed.status == 200);
    CHECK(zeroed.body["choices"][0]["text"] == text);
    std::filesystem::remove(model);
    CHECK(http_request(port, "GET", "/health").status == 200);
    server.signal(SIGTERM);
    CHECK(server.wait_exit(20) == std::optional<int>(0));
  }
}

// `inflight serve` against bad clients: every 4xx the API defines, in the OpenAI error envelope; hostile
// or broken HTTP (random bytes, truncated and oversized bodies, header floods, a stalled half request);
// clients that hang up mid-request, whose KV blocks must be free right after.
#include <doctest/doctest.h>

#include <random>
#include <thread>

#include "serve_fixture.h"

using namespace inflight::test;

namespace {

std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = char(rng() & 0xFF);
  return s;
}

bool healthy(uint16_t port) { return http_request(port, "GET", "/health").status == 200; }

double cancelled_count(const std::string& metrics) {
  const std::string key = "inflight_requests_total{finish_reason=\"cancelled\"} ";
  const size_t pos = metrics.find(key);
  return pos == std::string::npos ? -1 : std::stod(metrics.substr(pos + key.size()));
}

std::string metrics_text(uint16_t port) { return http_request(port, "GET", "/metrics").body; }

// Polls /metrics until a request more than `cancelled_before` ended cancelled and the KV cache holds no
// blocks (the gauges are a snapshot taken after each engine step); returns the last exposition.
std::string wait_cancelled_and_free(uint16_t port, double cancelled_before, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(timeout_s * 1000));
  std::string text;
  do {
    text = metrics_text(port);
    if (cancelled_count(text) > cancelled_before && metric_value(text, "inflight_kv_cache_blocks_used") == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  } while (std::chrono::steady_clock::now() < deadline);
  return text;
}

void check_400(uint16_t port, const json& body, const std::string& param, const std::string& target = "/v1/completions") {
  CAPTURE(body.dump());
  const JsonResult r = post_json(port, target, body);
  CHECK(r.status == 400);
  check_error_envelope(r.body);
  CHECK(r.body["error"]["type"] == "invalid_request_error");
  if (!param.empty()) CHECK(r.body["error"]["param"] == param);
}

}  // namespace

TEST_SUITE("serve errors") {
  TEST_CASE("400: malformed JSON, wrong types and out-of-range values name the field") {
    const uint16_t port = stories_server().port();
    const HttpResult bad_json = http_request(port, "POST", "/v1/completions", "{\"prompt\": \"x\", ");
    CHECK(bad_json.status == 400);
    check_error_envelope(json::parse(bad_json.body));
    CHECK(json::parse(bad_json.body)["error"]["message"].get<std::string>().find("JSON") != std::string::npos);
    // A number past double's range is a JSON error too (found by fuzz_http), not a 500.
    const HttpResult overflow = http_request(port, "POST", "/v1/completions", "{\"prompt\": \"x\", \"seed\": 71e308}");
    CHECK(overflow.status == 400);
    check_error_envelope(json::parse(overflow.body));

    check_400(port, json::array({1, 2}), "");
    check_400(port, {{"max_tokens", 4}}, "prompt");
    check_400(port, {{"prompt", 42}}, "prompt");
    check_400(port, {{"prompt", json::array()}}, "prompt");
    check_400(port, {{"prompt", {1, 100000}}}, "prompt");
    check_400(port, {{"prompt", "x"}, {"max_tokens", "ten"}}, "max_tokens");
    check_400(port, {{"prompt", "x"}, {"max_tokens", 0}}, "max_tokens");
    check_400(port, {{"prompt", "x"}, {"temperature", 5}}, "temperature");
    check_400(port, {{"prompt", "x"}, {"temperature", "hot"}}, "temperature");
    check_400(port, {{"prompt", "x"}, {"top_p", 0}}, "top_p");
    check_400(port, {{"prompt", "x"}, {"n", 0}}, "n");
    check_400(port, {{"prompt", "x"}, {"logprobs", 50}}, "logprobs");
    check_400(port, {{"prompt", "x"}, {"stop", 3}}, "stop");
    check_400(port, {{"prompt", "x"}, {"stream", "yes"}}, "stream");
    check_400(port, {{"prompt", "x"}, {"presence_penalty", 3}}, "presence_penalty");
    check_400(port, {{"prompt", "x"}, {"stop_token_ids", {-1}}}, "stop_token_ids");
    check_400(port, {{"prompt", "x"}, {"use_beam_search", true}, {"n", 20}}, "n");
    check_400(port, {{"messages", "hi"}}, "messages", "/v1/chat/completions");
    check_400(port, {{"messages", {{{"role", "wizard"}, {"content", "hi"}}}}}, "messages", "/v1/chat/completions");
    check_400(port, {{"messages", {{{"role", "user"}}}}}, "messages", "/v1/chat/completions");
  }

  TEST_CASE("400: a prompt longer than the context states its token count and the limit") {
    const uint16_t port = stories_server().port();
    const JsonResult r = post_json(port, "/v1/completions", {{"prompt", std::vector<int>(600, 300)}});
    CHECK(r.status == 400);
    check_error_envelope(r.body);
    const std::string message = r.body["error"]["message"];
    CHECK(message.find("600") != std::string::npos);
    CHECK(message.find("512") != std::string::npos);
    CHECK(r.body["error"]["code"] == "context_length_exceeded");

    std::string long_text;
    for (int i = 0; i < 400; ++i) long_text += "Once upon a time ";
    const JsonResult chat = post_json(port, "/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", long_text}}}}});
    CHECK(chat.status == 400);
    CHECK(chat.body["error"]["message"].get<std::string>().find("512") != std::string::npos);
  }

  TEST_CASE("404 for an unknown route or model, 405 for a wrong method") {
    const uint16_t port = stories_server().port();
    const HttpResult route = http_request(port, "GET", "/v1/nothing");
    CHECK(route.status == 404);
    check_error_envelope(json::parse(route.body));

    const JsonResult model = post_json(port, "/v1/completions", {{"model", "gpt-4"}, {"prompt", "x"}});
    CHECK(model.status == 404);
    check_error_envelope(model.body);
    CHECK(model.body["error"]["code"] == "model_not_found");
    CHECK(model.body["error"]["param"] == "model");
    CHECK(http_request(port, "GET", "/v1/models/gpt-4").status == 404);

    const HttpResult get = http_request(port, "GET", "/v1/completions");
    CHECK(get.status == 405);
    CHECK(get.header("allow") == "POST");
    check_error_envelope(json::parse(get.body));
    const HttpResult post = http_request(port, "POST", "/health", "{}");
    CHECK(post.status == 405);
    CHECK(post.header("allow") == "GET");
  }

  TEST_CASE("413 for a 10 MB body; 431 for a header flood; the server stays healthy") {
    const uint16_t port = stories_server().port();
    const std::string big = "{\"prompt\": \"" + std::string(10 << 20, 'a') + "\"}";
    {
      Connection c(port);
      c.send_all(format_request("POST", "/v1/completions", big));
      const HttpResult r = c.read_response();
      CHECK(r.status == 413);
      check_error_envelope(json::parse(r.body));
    }
    {
      // The answer comes from the header alone (Content-Length), with Expect: 100-continue too.
      Connection c(port);
      c.send_all("POST /v1/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 10485760\r\n\r\n");
      CHECK(c.read_response().status == 413);
    }
    {
      std::string headers;
      for (int i = 0; i < 2000; ++i) headers += "X-Flood-" + std::to_string(i) + ": " + std::string(40, 'x') + "\r\n";
      Connection c(port);
      c.send_all("GET /health HTTP/1.1\r\nHost: x\r\n" + headers + "\r\n");
      const HttpResult r = c.read_response();
      CHECK(r.status == 431);
    }
    CHECK(healthy(port));
  }

  TEST_CASE("random bytes, truncated bodies and a stalled half request leave the server healthy") {
    const uint16_t port = stories_server().port();
    for (uint32_t seed = 0; seed < 8; ++seed) {
      // As a JSON body: 400.
      const HttpResult body = http_request(port, "POST", "/v1/completions", random_bytes(2000, seed));
      CHECK(body.status == 400);
      // As the whole request: refused (400) or just closed.
      Connection c(port, 5);
      c.send_all(random_bytes(3000, seed + 100) + "\r\n\r\n");
      const HttpResult raw = c.read_response();
      CHECK((raw.status == 400 || raw.status == 0));
    }
    {
      // Fewer bytes than Content-Length, then end of stream: nobody to answer.
      Connection c(port, 5);
      c.send_all("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prompt\": \"Once");
      c.shutdown_write();
      CHECK(c.closed_by_peer_within(3000));
    }
    {
      const HttpResult truncated_json = http_request(port, "POST", "/v1/completions", "{\"prompt\": \"Once upon a ti");
      CHECK(truncated_json.status == 400);
    }
    // Half a request that then stalls: other clients are served meanwhile.
    Connection stalled(port);
    stalled.send_all("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 200\r\n\r\n{\"prompt\": ");
    Connection stalled_header(port);
    stalled_header.send_all("GET /health HTTP/1.1\r\nHost: x\r\nX-Partial: ");
    CHECK(healthy(port));
    const JsonResult r = post_json(port, "/v1/completions", {{"prompt", "The cat"}, {"max_tokens", 4}});
    CHECK(r.status == 200);
    // Keep-alive: two requests on one connection.
    Connection keep(port);
    keep.send_all(format_request("GET", "/health", ""));
    CHECK(keep.read_response().status == 200);
    keep.send_all(format_request("GET", "/v1/models", ""));
    CHECK(keep.read_response().status == 200);
  }

  TEST_CASE("a client that disconnects mid-stream is cancelled and its KV blocks are free right after") {
    const uint16_t port = stories_server().port();
    const double cancelled_before = cancelled_count(metrics_text(port));
    {
      Connection c(port);
      const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 480}, {"n", 4}, {"ignore_eos", true},
                         {"temperature", 0.8}, {"stream", true}};
      c.send_all(format_request("POST", "/v1/completions", body.dump()));
      std::string received;
      while (received.find("data: ") == std::string::npos) {
        const std::string more = c.recv_some();
        REQUIRE(!more.empty());
        received += more;
      }
      c.close();
    }
    // Not cancelled, the request would end as `length` (in about 0.5 s) and the cancelled count would stay.
    const std::string metrics = wait_cancelled_and_free(port, cancelled_before, 2.0);
    CHECK(cancelled_count(metrics) > cancelled_before);
    CHECK(metric_value(metrics, "inflight_kv_cache_blocks_used") == 0);
    CHECK(metric_value(metrics, "inflight_num_requests_running") == 0);
  }

  TEST_CASE("a client that disconnects while waiting for a non-streamed answer is cancelled too") {
    const uint16_t port = stories_server().port();
    const double cancelled_before = cancelled_count(metrics_text(port));
    {
      Connection c(port);
      const json body = {{"prompt", {"Once upon a time", "The cat"}}, {"max_tokens", 480}, {"n", 8},
                         {"ignore_eos", true}, {"temperature", 0.8}};
      c.send_all(format_request("POST", "/v1/completions", body.dump()));
      // Wait until the engine holds blocks for it, then hang up.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (metric_value(metrics_text(port), "inflight_kv_cache_blocks_used") <= 0 &&
             std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    const std::string metrics = wait_cancelled_and_free(port, cancelled_before, 2.0);
    CHECK(cancelled_count(metrics) > cancelled_before);
    CHECK(metric_value(metrics, "inflight_kv_cache_blocks_used") == 0);
  }
}

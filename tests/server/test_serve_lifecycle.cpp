// `inflight serve` start-up, limits and shutdown, each on its own server: 503 while the model loads, a
// config file under the flags, the request timeout, the API key (401), a full queue (429), the drain on
// SIGTERM (in-flight streams finish, new requests get 503, exit 0), SIGTERM with no grace period (the
// stream is cancelled, exit 0 within seconds), and the quantized-KV settings reaching the cache.
#include <doctest/doctest.h>

#include <atomic>
#include <fstream>
#include <memory>
#include <thread>

#include "serve_fixture.h"

using namespace inflight::test;

TEST_SUITE("serve lifecycle") {
  TEST_CASE("503 while loading; a config file under the flags; the request timeout closes a stalled client") {
    TempDir dir("serve-config");
    const std::string config_path = dir / "server.json";
    std::ofstream(config_path) << R"({"served_model_name": "from-config", "request_timeout_seconds": 1,
                                      "max_num_seqs": 8, "kv_cache_memory": "16M"})";
    ServerProcess server({"--config", config_path, "--model", stories_gguf(), "--served-model-name", "from-flag"},
                         {"INFLIGHT_DEBUG_LOAD_DELAY_MS=2500"});
    const uint16_t port = server.port();

    const HttpResult health = http_request(port, "GET", "/health");
    CHECK(health.status == 503);
    CHECK(!health.header("retry-after").empty());
    check_error_envelope(json::parse(health.body));
    const JsonResult loading = post_json(port, "/v1/completions", {{"prompt", "x"}});
    CHECK(loading.status == 503);
    CHECK(!loading.http.header("retry-after").empty());
    check_error_envelope(loading.body);
    CHECK(http_request(port, "GET", "/metrics").status == 200);

    REQUIRE(server.wait_ready());
    // The flag wins over the file; the file's other settings hold.
    const json models = json::parse(http_request(port, "GET", "/v1/models").body);
    CHECK(models["data"][0]["id"] == "from-flag");
    const std::string log = server.log();
    CHECK(log.find("context 512 tokens") != std::string::npos);
    CHECK(log.find("KV cache 256 blocks x 16 tokens = 4096 tokens") != std::string::npos);

    Connection stalled(port);
    stalled.send_all("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{");
    CHECK(stalled.closed_by_peer_within(4000));
    CHECK(http_request(port, "GET", "/health").status == 200);
  }

  TEST_CASE("401 without the API key; 429 with Retry-After when the queue is full; SIGTERM mid-stream with no "
            "grace period cancels the stream and exits 0") {
    ServerProcess server({"--model", stories_gguf(), "--api-key", "sekret", "--max-num-seqs", "1", "--max-queue", "1",
                          "--kv-cache-memory", "16M", "--shutdown-grace-seconds", "0"});
    REQUIRE(server.wait_ready());
    const uint16_t port = server.port();
    const std::string auth = "Authorization: Bearer sekret\r\n";
    const json small = {{"prompt", "The cat"}, {"max_tokens", 4}};

    const JsonResult missing = post_json(port, "/v1/completions", small);
    CHECK(missing.status == 401);
    check_error_envelope(missing.body);
    const JsonResult wrong = post_json(port, "/v1/completions", small, "Authorization: Bearer guess\r\n");
    CHECK(wrong.status == 401);
    CHECK(http_request(port, "GET", "/v1/models").status == 401);
    CHECK(post_json(port, "/v1/completions", small, auth).status == 200);
    CHECK(http_request(port, "GET", "/health").status == 200);  // health and metrics stay open

    // One running, one waiting: the rest of a burst is refused.
    const json big = {{"prompt", "Once upon a time"}, {"max_tokens", 300}, {"ignore_eos", true}};
    std::vector<JsonResult> results(12);
    std::vector<std::thread> clients;
    for (size_t i = 0; i < results.size(); ++i)
      clients.emplace_back([&, i] { results[i] = post_json(port, "/v1/completions", big, auth); });
    for (std::thread& t : clients) t.join();
    int num_ok = 0, num_full = 0;
    for (const JsonResult& r : results) {
      if (r.status == 200) ++num_ok;
      if (r.status != 429) continue;
      ++num_full;
      CHECK(r.http.header("retry-after") == "1");
      check_error_envelope(r.body);
    }
    CHECK(num_ok >= 1);
    CHECK(num_full >= 1);
    CHECK(num_ok + num_full == int(results.size()));

    // SIGTERM while a stream runs, no grace period: the stream ends cancelled (an error chunk, then [DONE])
    // and the process exits 0.
    Connection c(port);
    const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 480}, {"ignore_eos", true}, {"stream", true},
                       {"temperature", 0.8}};
    c.send_all(format_request("POST", "/v1/completions", body.dump(), auth));
    std::string received;
    while (received.find("data: ") == std::string::npos) {
      const std::string more = c.recv_some();
      REQUIRE(!more.empty());
      received += more;
    }
    const auto signalled_at = std::chrono::steady_clock::now();
    server.signal(SIGTERM);
    for (std::string more; !(more = c.recv_some()).empty();) received += more;
    CHECK(received.find("data: [DONE]") != std::string::npos);
    CHECK(received.find("shutting down") != std::string::npos);
    CHECK(received.find("\"finish_reason\":\"length\"") == std::string::npos);
    const std::optional<int> code = server.wait_exit(10);
    REQUIRE(code.has_value());
    CHECK(*code == 0);
    CHECK(std::chrono::steady_clock::now() - signalled_at < std::chrono::seconds(5));
  }

  TEST_CASE("the drain: on SIGTERM in-flight streams finish with every token, new requests and /health get 503, exit 0") {
    ServerProcess server({"--model", stories_gguf(), "--kv-cache-memory", "16M"});  // default grace period
    REQUIRE(server.wait_ready());
    const uint16_t port = server.port();
    const int max_tokens = 480;
    // With 5 top logprobs a chunk is ~0.5 KB, the stream ~250 KB: more than the socket buffers hold.
    const json body = {{"prompt", "Once upon a time"}, {"max_tokens", max_tokens}, {"ignore_eos", true},
                       {"logprobs", 5}, {"stream", true}, {"stream_options", {{"include_usage", true}}}};

    // Two slow readers: each stream is read up to its first chunk before the signal and no further, so their
    // responses are still being written when the drain starts.
    const int num_streams = 2;
    std::vector<std::unique_ptr<Connection>> streams;
    std::vector<std::string> received(num_streams);
    for (int i = 0; i < num_streams; ++i) {
      streams.push_back(std::make_unique<Connection>(port, 60, 4096));
      streams.back()->send_all(format_request("POST", "/v1/completions", body.dump()));
      while (received[size_t(i)].find("data: ") == std::string::npos) {
        const std::string more = streams.back()->recv_some(1024);
        REQUIRE(!more.empty());
        received[size_t(i)] += more;
      }
    }

    server.signal(SIGTERM);
    // Draining: the health check and a new request get 503 with an OpenAI error body.
    const auto drain_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    HttpResult health;
    do {
      health = http_request(port, "GET", "/health");
    } while (health.status == 200 && std::chrono::steady_clock::now() < drain_deadline);
    CHECK(health.status == 503);
    check_error_envelope(json::parse(health.body));
    const JsonResult refused = post_json(port, "/v1/completions", {{"prompt", "x"}, {"max_tokens", 4}});
    CHECK(refused.status == 503);
    CHECK(!refused.http.header("retry-after").empty());
    check_error_envelope(refused.body);
    CHECK(refused.body["error"]["code"] == "shutting_down");

    // Every stream that began before the signal completes with all its tokens.
    for (int i = 0; i < num_streams; ++i) {
      std::string& text = received[size_t(i)];
      for (std::string more; !(more = streams[size_t(i)]->recv_some()).empty();) text += more;
      CHECK(text.find("\"completion_tokens\":" + std::to_string(max_tokens)) != std::string::npos);
      CHECK(text.find("data: [DONE]") != std::string::npos);
      CHECK(text.find("shutting down") == std::string::npos);
    }
    const std::optional<int> code = server.wait_exit(30);
    REQUIRE(code.has_value());
    CHECK(*code == 0);
    const std::string log = server.log();
    INFO(log);
    CHECK(log.find("draining: new requests get 503; 2 in flight get up to 25 s to finish") != std::string::npos);
    CHECK(log.find("drained: every in-flight request finished") != std::string::npos);
  }

  TEST_CASE("--kv-static-amax and --kv-quant-group reach the KV cache; a bad group stops start-up with a clear error") {
    // A static amax far below the model's K/V values saturates them: the text leaves the f32 golden one,
    // and equals the same model generating in-process over an int8-static cache with that amax.
    const GoldenCase g = golden_cases().front();
    const int n = 32;
    ServerProcess server({"--model", stories_gguf(), "--kv-cache-memory", "16M", "--kv-cache-dtype", "int8-static",
                          "--kv-static-amax", "0.05"});
    REQUIRE(server.wait_ready());
    const JsonResult r = post_json(server.port(), "/v1/completions",
                                   {{"prompt", g.prompt_ids}, {"max_tokens", n}, {"temperature", 0}, {"ignore_eos", true}});
    REQUIRE(r.status == 200);
    const std::string served = r.body["choices"][0]["text"];
    CHECK(served == offline_greedy_text(g.prompt_ids, n, inflight::kernels::KvDType::Int8Static, 0.05f));
    CHECK(g.generated_text.rfind(served, 0) != 0);  // not a prefix of the f32 text

    // stories260K's head dim is 8: a group of 16 cannot divide it.
    const CommandResult bad = run_inflight("serve --port 0 --model " + stories_gguf() +
                                           " --kv-cache-dtype int8 --kv-quant-group 16 --kv-cache-memory 16M");
    CHECK(bad.status == 1);
    CHECK(bad.output.find("quant group 16") != std::string::npos);
    const CommandResult negative = run_inflight("serve --port 0 --kv-static-amax -1");
    CHECK(negative.status == 1);
    CHECK(negative.output.find("kv_static_amax") != std::string::npos);
  }
}

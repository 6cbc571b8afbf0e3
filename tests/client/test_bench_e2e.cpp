// `inflight bench` end to end against `inflight serve` on stories260K over 127.0.0.1: every request succeeds,
// the result file has every metric, and the token counts are the server's own.
#include <doctest/doctest.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <regex>
#include <string>
#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include "server/server_process.h"
#include "test_support.h"

using nlohmann::json;
using namespace inflight::test;

namespace {

json read_json(const std::string& path) {
  std::ifstream in(path);
  REQUIRE_MESSAGE(in, path);
  return json::parse(in);
}

// An unlabelled sample of a Prometheus exposition.
double scrape(uint16_t port, const std::string& name) {
  const std::string text = "\n" + http_request(port, "GET", "/metrics").body;
  const std::string key = "\n" + name + " ";
  const size_t pos = text.find(key);
  REQUIRE_MESSAGE(pos != std::string::npos, name);
  return std::stod(text.substr(pos + key.size()));
}

void check_every_metric(const json& j) {
  for (const char* key : {"duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
                          "request_throughput", "request_goodput", "output_throughput", "total_token_throughput",
                          "input_lens", "output_lens", "ttfts", "itls", "e2els", "errors"})
    CHECK_MESSAGE(j.contains(key), key);
  for (const char* m : {"ttft", "tpot", "itl", "e2el"})
    for (const char* stat : {"mean", "median", "std", "p90", "p99"}) {
      const std::string key = std::string(stat) + "_" + m + "_ms";
      REQUIRE_MESSAGE(j.contains(key), key);
      CHECK_MESSAGE(j[key].get<double>() >= 0, key);
    }
}

}  // namespace

TEST_SUITE("bench end to end") {
  TEST_CASE("20 random-token requests at concurrency 4: all succeed, every metric, the server's token counts") {
    ServerProcess server({"--model", stories_gguf(), "--kv-cache-memory", "64M"});
    REQUIRE_MESSAGE(server.wait_ready(), server.log());
    const uint16_t port = server.port();
    const double generated_before = scrape(port, "inflight_generation_tokens_total");

    TempDir dir("bench-e2e");
    const std::string result_path = dir / "result.json";
    const CommandResult r = run_inflight("bench --base-url http://127.0.0.1:" + std::to_string(port) +
                                         " --num-prompts 20 --max-concurrency 4 --input-len 32 --output-len 16"
                                         " --vocab-size 512 --seed 1 --goodput ttft:60000,tpot:60000"
                                         " --result-file " + result_path);
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(r.output.find("Serving Benchmark Result") != std::string::npos);
    CHECK(std::regex_search(r.output, std::regex(R"(Successful requests: +20 *\n)")));
    CHECK(std::regex_search(r.output, std::regex(R"(Failed requests: +0 *\n)")));
    CHECK(r.output.find("20/20 requests") != std::string::npos);  // the progress bar's last line

    const json j = read_json(result_path);
    check_every_metric(j);
    CHECK(j["completed"] == 20);
    CHECK(j["failed"] == 0);
    CHECK(j["max_concurrency"] == 4);
    for (const json& e : j["errors"]) CHECK(e == "");
    // Token counts are the server's usage: ignore_eos makes every output exactly 16 tokens, and a prompt of
    // 32 token ids is 32 prompt tokens.
    int64_t input_sum = 0, output_sum = 0;
    for (size_t i = 0; i < 20; ++i) {
      CHECK(j["usage_reported"][i] == true);
      CHECK(j["output_lens"][i] == 16);
      CHECK(j["input_lens"][i] == 32);
      CHECK(j["itls"][i].size() <= 15);
      CHECK(j["ttfts"][i].get<double>() > 0);
      CHECK(j["e2els"][i].get<double>() >= j["ttfts"][i].get<double>());
      input_sum += j["input_lens"][i].get<int64_t>();
      output_sum += j["output_lens"][i].get<int64_t>();
    }
    CHECK(j["total_input_tokens"] == input_sum);
    CHECK(j["total_output_tokens"] == output_sum);
    CHECK(j["request_goodput"].get<double>() == doctest::Approx(j["request_throughput"].get<double>()));
    CHECK(j["output_throughput"].get<double>() ==
          doctest::Approx(double(output_sum) / j["duration"].get<double>()));
    // The server generated exactly these tokens, plus the 16 of the initial test request.
    CHECK(scrape(port, "inflight_generation_tokens_total") - generated_before == double(output_sum + 16));
  }

  TEST_CASE("chat with a JSONL dataset over a request-rate sweep: one table, one result per rate") {
    ServerProcess server({"--model", stories_gguf(), "--kv-cache-memory", "64M"});
    REQUIRE_MESSAGE(server.wait_ready(), server.log());
    TempDir dir("bench-e2e-chat");
    const std::string dataset = dir / "prompts.jsonl";
    std::ofstream(dataset) << R"({"prompt": "Tell me a story about a cat.", "output_len": 12})" "\n"
                           << R"({"prompt": "Once upon a time", "output_len": 6})" "\n";
    const std::string result_path = dir / "sweep.json";
    const CommandResult r = run_inflight("bench --base-url http://127.0.0.1:" + std::to_string(server.port()) +
                                         "/v1 --endpoint chat --dataset " + dataset +
                                         " --num-prompts 6 --max-concurrency 3 --sweep 40,inf --no-progress"
                                         " --result-file " + result_path);
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(r.output.find("| 40 | 3 | 6 | 0 |") != std::string::npos);
    CHECK(r.output.find("| inf | 3 | 6 | 0 |") != std::string::npos);
    const json j = read_json(result_path);
    REQUIRE(j["runs"].size() == 2);
    for (const json& run : j["runs"]) {
      check_every_metric(run);
      CHECK(run["completed"] == 6);
      CHECK(run["endpoint"] == "chat");
      for (size_t i = 0; i < 6; ++i) {
        CHECK(run["usage_reported"][i] == true);
        CHECK(run["output_lens"][i].get<int>() >= 1);
        CHECK(run["output_lens"][i].get<int>() <= 12);
        CHECK(run["input_lens"][i].get<int>() > 4);
      }
    }
  }

  TEST_CASE("bad settings are clear errors; a server that refuses a request fails the run loudly") {
    CommandResult r = run_inflight("bench --endpoint embeddings");
    CHECK(r.status == 1);
    CHECK(r.output.find("embeddings") != std::string::npos);
    r = run_inflight("bench --base-url https://example.invalid");
    CHECK(r.status == 1);
    CHECK(r.output.find("https") != std::string::npos);
    r = run_inflight("bench --goodput ttft=5");
    CHECK(r.status == 1);
    CHECK(r.output.find("ttft=5") != std::string::npos);

    ServerProcess server({"--model", stories_gguf(), "--kv-cache-memory", "64M"});
    REQUIRE_MESSAGE(server.wait_ready(), server.log());
    // 600 prompt tokens do not fit stories260K's 512-token context: the initial request is refused.
    r = run_inflight("bench --base-url http://127.0.0.1:" + std::to_string(server.port()) +
                     " --num-prompts 2 --input-len 600 --output-len 4 --no-progress");
    CHECK(r.status == 1);
    CHECK(r.output.find("HTTP 400") != std::string::npos);
  }

  TEST_CASE("failed requests make the exit status 1, unless --max-failures tolerates them") {
    // One sequence running and one waiting: the rest of a burst of 12 gets 429. The initial test request
    // goes alone, so the run itself starts.
    ServerProcess server({"--model", stories_gguf(), "--kv-cache-memory", "16M", "--max-num-seqs", "1",
                          "--max-queue", "1"});
    REQUIRE_MESSAGE(server.wait_ready(), server.log());
    const std::string run = "bench --base-url http://127.0.0.1:" + std::to_string(server.port()) +
                            " --num-prompts 12 --input-len 8 --output-len 200 --no-progress";
    CommandResult r = run_inflight(run);
    INFO(r.output);
    CHECK(r.status == 1);
    std::smatch m;
    REQUIRE(std::regex_search(r.output, m, std::regex(R"(Failed requests: +(\d+) *\n)")));
    const int num_failed = std::stoi(m[1]);
    CHECK(num_failed >= 1);
    CHECK(num_failed < 12);
    CHECK(r.output.find("HTTP 429") != std::string::npos);
    CHECK(r.output.find("more than --max-failures 0") != std::string::npos);

    r = run_inflight(run + " --max-failures 12");
    INFO(r.output);
    CHECK(r.status == 0);
    CHECK(std::regex_search(r.output, std::regex(R"(Failed requests: +[1-9]\d* *\n)")));
    r = run_inflight(run + " --max-failures -1");
    CHECK(r.status == 1);
    CHECK(r.output.find("--max-failures must be >= 0") != std::string::npos);
  }
}

// --max-step-ms on `inflight serve` with stories260K: while one stream decodes, a long prompt's prefill is
// cut into chunks and the stream gets a token in every one of those steps (counted in /v1/status's steps,
// not timed: the step cost comes from the INFLIGHT_DEBUG_STEP_COST test hook); with 0 the prompt is one
// step; without the hook the cost is learned from the steps and reported. With --prefill-order short-first a
// short prompt sent while a long one is prefilling is answered before the long one; with fcfs after it.
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "serve_fixture.h"

using namespace inflight;
using namespace inflight::test;

namespace {

constexpr int kLongPrompt = 400;  // stories260K's context is 512

struct PrefillSteps {
  std::vector<json> steps;  // the steps that computed the long prompt, oldest first
  json status;
};

// Starts a stream, then sends a kLongPrompt-token prompt (max_tokens 1) while it decodes; returns the
// steps that held prompt tokens after the stream's own prompt.
PrefillSteps long_prompt_beside_a_stream(const std::vector<std::string>& flags, const std::vector<std::string>& env) {
  std::vector<std::string> args = {"--model", stories_gguf(), "--kv-cache-memory", "16M", "--max-num-batched-tokens", "512"};
  args.insert(args.end(), flags.begin(), flags.end());
  ServerProcess server(args, env);
  REQUIRE_MESSAGE(server.wait_ready(), server.log());
  const uint16_t port = server.port();

  // At 5 ms a step, 450 tokens keep the stream decoding for seconds.
  Connection stream(port);
  const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 450}, {"ignore_eos", true},
                     {"temperature", 0}, {"stream", true}};
  stream.send_all(format_request("POST", "/v1/completions", body.dump()));
  std::string received;
  while (received.find("data: ") == std::string::npos) {
    const std::string more = stream.recv_some();
    REQUIRE(!more.empty());
    received += more;
  }
  std::vector<int> ids;
  for (int i = 0; i < kLongPrompt; ++i) ids.push_back(3 + (i * 37) % 500);
  const HttpResult r = http_request(port, "POST", "/v1/completions",
                                    json{{"prompt", ids}, {"max_tokens", 1}, {"temperature", 0}}.dump());
  REQUIRE_MESSAGE(r.status == 200, r.body);
  // The response may be written before the engine thread records the step that finished it: poll until
  // every prompt token is in the step log.
  PrefillSteps out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (true) {
    out.status = json::parse(http_request(port, "GET", "/v1/status").body);
    out.steps.clear();
    int total = 0;
    bool first = true;  // the stream's own prompt
    for (const json& s : out.status["steps"]) {
      if (s["context_tokens"] == 0) continue;
      if (first) {
        first = false;
        continue;
      }
      out.steps.push_back(s);
      total += int(s["context_tokens"]);
    }
    if ((total >= kLongPrompt && out.status["requests"]["running"] == 1) || std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE(out.status["requests"]["running"] == 1);  // the stream still decodes
  return out;
}


// While a stream decodes, a kLongPrompt-token prompt is sent, and once it is prefilling a 10-token one;
// returns whether the long prompt was still running when the short one's response came back.
bool long_prompt_still_running_when_short_one_answers(const char* prefill_order) {
  ServerProcess server({"--model", stories_gguf(), "--kv-cache-memory", "16M", "--max-num-batched-tokens", "512",
                        "--max-step-ms", "6", "--prefill-order", prefill_order},
                       // ms: 1 per step, 0.1 per prompt token, 1 per decoding sequence: 40 prompt tokens a step
                       // beside the stream, 40 ms a step: the long prompt takes 10 steps (0.4 s) or more.
                       {"INFLIGHT_DEBUG_STEP_DELAY_MS=40", "INFLIGHT_DEBUG_STEP_COST=1,0.1,1,0"});
  REQUIRE_MESSAGE(server.wait_ready(), server.log());
  const uint16_t port = server.port();
  Connection stream(port);
  stream.send_all(format_request("POST", "/v1/completions",
                                 json{{"prompt", "Once upon a time"}, {"max_tokens", 450}, {"ignore_eos", true},
                                      {"temperature", 0}, {"stream", true}}
                                     .dump()));
  std::string received;
  while (received.find("data: ") == std::string::npos) {
    const std::string more = stream.recv_some();
    REQUIRE(!more.empty());
    received += more;
  }
  std::vector<int> long_ids, short_ids;
  for (int i = 0; i < kLongPrompt; ++i) long_ids.push_back(3 + (i * 37) % 500);
  for (int i = 0; i < 10; ++i) short_ids.push_back(5 + i * 11);
  Connection long_one(port);
  long_one.send_all(format_request("POST", "/v1/completions",
                                   json{{"prompt", long_ids}, {"max_tokens", 1}, {"temperature", 0}}.dump()));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (json::parse(http_request(port, "GET", "/v1/status").body)["requests"]["running"] != 2) {
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  const HttpResult r = http_request(port, "POST", "/v1/completions",
                                    json{{"prompt", short_ids}, {"max_tokens", 1}, {"temperature", 0}}.dump());
  REQUIRE_MESSAGE(r.status == 200, r.body);
  return json::parse(http_request(port, "GET", "/v1/status").body)["requests"]["running"] == 2;
}
}  // namespace

TEST_SUITE("serve step budget") {
  TEST_CASE("--max-step-ms: a long prompt is prefilled in chunks under the budget; the stream gets a token every step") {
    // ms: 1 per step, 0.1 per prompt token, 1 per decoding sequence: 10 - 2 leaves 80 prompt tokens a step.
    const PrefillSteps p = long_prompt_beside_a_stream(
        {"--max-step-ms", "10"}, {"INFLIGHT_DEBUG_STEP_DELAY_MS=5", "INFLIGHT_DEBUG_STEP_COST=1,0.1,1,0"});
    CHECK(p.status["step_budget"]["max_step_ms"] == 10.0);
    CHECK(p.status["step_budget"]["prefill_order"] == "short-first");  // the default
    CHECK(p.status["step_budget"]["prefill_token_ms"] == 0.1);
    REQUIRE(p.steps.size() >= 5);
    int total = 0;
    for (const json& s : p.steps) {
      CAPTURE(s.dump());
      total += int(s["context_tokens"]);
      CHECK(s["context_tokens"] <= 80);
      CHECK(s["context_tokens"] >= 32);  // the last chunk may be shorter, but 400 = 5 x 80
      CHECK(s["generation_seqs"] == 1);  // the stream's token, every step of the prefill
      CHECK(s["generation_tokens"] == 1);
      CHECK(s["predicted_ms"] <= 10.0 + 1e-9);
      CHECK(s["predicted_ms"] > 0.0);
    }
    CHECK(total == kLongPrompt);
    // The prefill's steps are consecutive: no step went without the stream.
    CHECK(int(p.steps.back()["step"]) - int(p.steps.front()["step"]) + 1 == int(p.steps.size()));
  }

  TEST_CASE("--max-step-ms 0: the same prompt is one step, as the token budget allows (either prefill order)") {
    for (const char* order : {"fcfs", "short-first"}) {
      CAPTURE(order);
      const PrefillSteps p = long_prompt_beside_a_stream({"--max-step-ms", "0", "--prefill-order", order},
                                                         {"INFLIGHT_DEBUG_STEP_DELAY_MS=5", "INFLIGHT_DEBUG_STEP_COST=1,0.1,1,0"});
      CHECK(p.status["step_budget"]["max_step_ms"] == 0.0);
      CHECK(p.status["step_budget"]["prefill_order"] == order);
      REQUIRE(p.steps.size() == 1);
      CHECK(p.steps[0]["context_tokens"] == kLongPrompt);
      CHECK(p.steps[0]["generation_tokens"] == 1);
    }
  }

  TEST_CASE("an unknown --prefill-order is refused with a message naming the setting and the choices") {
    const CommandResult bad = run_inflight("serve --port 0 --prefill-order shortest");
    CHECK(bad.status != 0);
    CHECK(bad.output.find("prefill_order must be one of fcfs, short-first, got 'shortest'") != std::string::npos);
  }

  TEST_CASE("without the hook the step cost is learned from the steps and reported in /v1/status") {
    const PrefillSteps p = long_prompt_beside_a_stream({"--max-step-ms", "50"}, {"INFLIGHT_DEBUG_STEP_DELAY_MS=5"});
    const json& b = p.status["step_budget"];
    CHECK(b["max_step_ms"] == 50.0);
    // Learned: the model starts at zero, and the fit gives some term the steps' time. Which term it is depends
    // on the steps it saw (under a sanitizer, few and prompt-heavy ones can put all of it on the prompt terms).
    double sum = 0.0;
    for (const char* k : {"fixed_ms", "prefill_token_ms", "decode_seq_ms", "attention_kpair_ms"}) {
      CHECK(double(b[k]) >= 0.0);
      sum += double(b[k]);
    }
    CHECK(sum > 0.0);
    CHECK(p.steps.size() >= 1);
    CHECK(p.status["steps"].back()["predicted_ms"] > 0.0);
  }

  TEST_CASE("a negative --max-step-ms is refused with a message naming it") {
    const CommandResult neg = run_inflight("serve --port 0 --max-step-ms -5");
    CHECK(neg.status != 0);
    CHECK(neg.output.find("max_step_ms") != std::string::npos);
  }

  TEST_CASE("--prefill-order short-first answers a short prompt while a long one that came first is prefilling") {
    CHECK(long_prompt_still_running_when_short_one_answers("short-first"));
    // First come, first served: the short prompt waits for all of the long one's chunks.
    CHECK_FALSE(long_prompt_still_running_when_short_one_answers("fcfs"));
  }
}

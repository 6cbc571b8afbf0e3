// What `inflight bench` reads and sends without a network: SSE framing, OpenAI stream chunks into timings,
// URLs, request bodies, prompt sets and arrival schedules.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "client/load_client.h"
#include "client/openai_stream.h"
#include "client/prompt_dataset.h"
#include "client/sse_parser.h"
#include "test_support.h"

using namespace inflight::client;

namespace {

std::vector<std::string> parse_all(const std::vector<std::string>& pieces) {
  SseParser parser;
  std::vector<std::string> events;
  const auto collect = [&](std::string_view data) { events.emplace_back(data); };
  for (const std::string& p : pieces) parser.feed(p, collect);
  parser.finish(collect);
  return events;
}

}  // namespace

TEST_SUITE("bench stream parsing") {
  TEST_CASE("SSE events split anywhere, CRLF or LF, comments and other fields ignored") {
    const std::string stream = ": keep-alive\r\nevent: x\r\ndata: {\"a\":1}\r\n\r\ndata:{\"b\":2}\n\ndata: [DONE]\n\n";
    const std::vector<std::string> expected = {"{\"a\":1}", "{\"b\":2}", "[DONE]"};
    CHECK(parse_all({stream}) == expected);
    for (size_t cut = 0; cut <= stream.size(); ++cut)  // one split point at every byte
      CHECK(parse_all({stream.substr(0, cut), stream.substr(cut)}) == expected);
    std::vector<std::string> bytes;
    for (char c : stream) bytes.emplace_back(1, c);
    CHECK(parse_all(bytes) == expected);
  }

  TEST_CASE("SSE multi-line data joins with newlines; a last event without its blank line still counts") {
    CHECK(parse_all({"data: one\ndata: two\n\n"}) == std::vector<std::string>{"one\ntwo"});
    CHECK(parse_all({"data: tail\n"}) == std::vector<std::string>{"tail"});
    CHECK(parse_all({"\n\n: only a comment\n\n"}).empty());
  }

  TEST_CASE("completions stream: TTFT, gaps and latency at token chunks, usage from the last chunk") {
    OpenAiStreamReader r(ApiKind::Completions);
    r.on_event(R"({"choices":[{"index":0,"text":"Once","finish_reason":null}],"usage":null})", 0.5);
    r.on_event(R"({"choices":[{"index":0,"text":" upon","finish_reason":null}],"usage":null})", 0.75);
    r.on_event(R"({"choices":[{"index":0,"text":" a","finish_reason":null}],"usage":null})", 1.0);
    r.on_event(R"({"choices":[{"index":0,"text":"","finish_reason":"length"}],"usage":null})", 1.25);
    r.on_event(R"({"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":3,"total_tokens":7}})", 1.5);
    r.on_event("[DONE]", 1.5);
    RequestOutcome o;
    r.finish(99, &o);
    CHECK(o.success);
    CHECK(o.ttft_s == 0.5);
    CHECK(o.latency_s == 1.0);  // neither the finish marker nor the usage chunk carries a token
    CHECK(o.itl_s == std::vector<double>{0.25, 0.25});
    CHECK(o.num_chunks == 3);
    CHECK(o.output_tokens == 3);
    CHECK(o.prompt_tokens == 4);
    CHECK(o.usage_reported);
    CHECK(o.generated_text == "Once upon a");
  }

  TEST_CASE("chat stream: a role-only header is no token; without usage the chunk count stands in") {
    OpenAiStreamReader r(ApiKind::Chat);
    r.on_event(R"({"choices":[{"index":0,"delta":{"role":"assistant"}}]})", 0.1);
    r.on_event(R"({"choices":[{"index":0,"delta":{"content":"Hi"}}]})", 0.4);
    r.on_event(R"({"choices":[{"index":0,"delta":{"content":" there"}}]})", 0.6);
    r.on_event(R"({"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]})", 0.7);
    RequestOutcome o;
    r.finish(12, &o);
    CHECK(o.success);
    CHECK(o.ttft_s == doctest::Approx(0.4));
    CHECK(o.latency_s == doctest::Approx(0.6));
    CHECK(o.output_tokens == 2);
    CHECK(o.prompt_tokens == 12);
    CHECK_FALSE(o.usage_reported);
    CHECK(o.generated_text == "Hi there");
  }

  TEST_CASE("an error chunk, a malformed chunk or no token at all fails the request with the reason") {
    {
      OpenAiStreamReader r(ApiKind::Completions);
      r.on_event(R"({"choices":[{"index":0,"text":"a"}]})", 0.1);
      r.on_event(R"({"error":{"message":"engine died","type":"server_error"}})", 0.2);
      RequestOutcome o;
      r.finish(0, &o);
      CHECK_FALSE(o.success);
      CHECK(o.error.find("engine died") != std::string::npos);
    }
    {
      OpenAiStreamReader r(ApiKind::Completions);
      r.on_event("{not json", 0.1);
      RequestOutcome o;
      r.finish(0, &o);
      CHECK_FALSE(o.success);
      CHECK(o.error.find("malformed") != std::string::npos);
    }
    {
      OpenAiStreamReader r(ApiKind::Completions);
      r.on_event("[DONE]", 0.1);
      RequestOutcome o;
      r.finish(0, &o);
      CHECK_FALSE(o.success);
      CHECK(o.error.find("without a token") != std::string::npos);
    }
  }

  TEST_CASE("base URLs and API paths") {
    ServerUrl u = parse_base_url("http://127.0.0.1:8000");
    CHECK(u.host == "127.0.0.1");
    CHECK(u.port == "8000");
    CHECK(api_path(u, "completions") == "/v1/completions");
    u = parse_base_url("http://lb/v1/");
    CHECK(u.port == "80");
    CHECK(api_path(u, "chat/completions") == "/v1/chat/completions");
    u = parse_base_url("http://[::1]:9000/proxy");
    CHECK(u.host == "::1");
    CHECK(u.port == "9000");
    CHECK(api_path(u, "models") == "/proxy/v1/models");
    CHECK_THROWS_WITH_AS(parse_base_url("https://x"), doctest::Contains("https"), std::invalid_argument);
    CHECK_THROWS_AS(parse_base_url("localhost:8000"), std::invalid_argument);
    CHECK_THROWS_AS(parse_base_url("http://host:80x"), std::invalid_argument);
  }

  TEST_CASE("request bodies stream with usage, exact lengths for random prompts, extra body merged") {
    LoadOptions o;
    o.model = "m";
    o.ignore_eos = true;
    BenchPrompt ids;
    ids.ids = {5, 6, 7};
    ids.prompt_len = 3;
    ids.output_len = 9;
    nlohmann::json b = request_body(o, ids);
    CHECK(b["prompt"] == nlohmann::json({5, 6, 7}));
    CHECK(b["max_tokens"] == 9);
    CHECK(b["ignore_eos"] == true);
    CHECK(b["stream"] == true);
    CHECK(b["stream_options"]["include_usage"] == true);
    CHECK(b["model"] == "m");
    o.api = ApiKind::Chat;
    o.extra_body = {{"temperature", 0.7}, {"top_k", 5}};
    BenchPrompt text;
    text.text = "hello";
    text.output_len = 4;
    b = request_body(o, text);
    CHECK(b["messages"][0]["content"] == "hello");
    CHECK(b["messages"][0]["role"] == "user");
    CHECK(b["temperature"] == 0.7);
    CHECK(b["top_k"] == 5);
    CHECK_THROWS_AS(request_body(o, ids), std::invalid_argument);
  }

  TEST_CASE("random prompts have exact lengths, ids inside the vocabulary, and repeat with the seed") {
    const auto a = random_token_prompts(20, 32, 16, 300, 7);
    REQUIRE(a.size() == 20);
    for (const BenchPrompt& p : a) {
      CHECK(p.ids.size() == 32);
      CHECK(p.prompt_len == 32);
      CHECK(p.output_len == 16);
      for (int32_t id : p.ids) CHECK((id >= kFirstRandomTokenId && id < 300));
    }
    CHECK(random_token_prompts(20, 32, 16, 300, 7)[5].ids == a[5].ids);
    CHECK(random_token_prompts(20, 32, 16, 300, 8)[5].ids != a[5].ids);
    const auto w = random_word_prompts(3, 10, 5, 1);
    CHECK(std::count(w[0].text.begin(), w[0].text.end(), ' ') == 9);
    CHECK_THROWS_AS(random_token_prompts(1, 0, 1, 300, 0), std::invalid_argument);
  }

  TEST_CASE("mixed datasets: exact shares of each shape, shuffled by the seed; bad classes are named") {
    const auto p = mixed_prompts("mixed:1500x32:1,64x128:3", 48, 49152, false, 0);
    REQUIRE(p.size() == 48);
    int num_long = 0;
    for (const BenchPrompt& x : p) {
      const bool is_long = x.ids.size() == 1500;
      num_long += is_long;
      CHECK(x.prompt_len == int64_t(x.ids.size()));
      CHECK(x.output_len == (is_long ? 32 : 128));
      if (!is_long) CHECK(x.ids.size() == 64);
      for (int32_t id : x.ids) CHECK((id >= kFirstRandomTokenId && id < 49152));
    }
    CHECK(num_long == 12);
    // The long ones are spread over the run, not all first; the same seed gives the same order.
    int long_in_first_half = 0;
    for (size_t i = 0; i < 24; ++i) long_in_first_half += p[i].ids.size() == 1500;
    CHECK((long_in_first_half > 0 && long_in_first_half < 12));
    CHECK(mixed_prompts("mixed:1500x32:1,64x128:3", 48, 49152, false, 0)[7].ids == p[7].ids);
    CHECK(mixed_prompts("mixed:1500x32:1,64x128:3", 48, 49152, false, 1)[7].ids != p[7].ids);
    // Largest remainder: 10 at 1:1:1 is 4, 3, 3; a weight defaults to 1; chat prompts are words.
    const auto three = mixed_prompts("mixed:5x1,6x1:1,7x1", 10, 100, false, 3);
    int by_len[8] = {};
    for (const BenchPrompt& x : three) ++by_len[x.ids.size()];
    CHECK(by_len[5] == 4);
    CHECK(by_len[6] == 3);
    CHECK(by_len[7] == 3);
    const auto chat = mixed_prompts("mixed:8x2", 2, 100, true, 0);
    CHECK(chat[0].ids.empty());
    CHECK(std::count(chat[0].text.begin(), chat[0].text.end(), ' ') == 7);
    for (const char* bad : {"mixed:", "mixed:1500", "mixed:1500x", "mixed:0x5", "mixed:5x0", "mixed:5x5:0", "mixed:5x5:-1",
                            "mixed:5x5,", "mixed:5y5", "mixed:5x5:1:2", "mixed:5x5 "}) {
      CAPTURE(bad);
      CHECK_THROWS_WITH_AS(mixed_prompts(bad, 4, 100, false, 0), doctest::Contains("--dataset"), std::invalid_argument);
    }
  }

  TEST_CASE("JSONL datasets: text or ids, per-line output_len, cycling; bad lines name file and line") {
    inflight::test::TempDir dir("bench-dataset");
    const std::string path = dir / "prompts.jsonl";
    std::ofstream(path) << R"({"prompt": "Once upon a time", "output_len": 5})" "\n\n"
                        << R"({"prompt": [1, 2, 3]})" "\n";
    const auto p = load_jsonl_prompts(path, 5, 12, 0);
    REQUIRE(p.size() == 5);
    int num_text = 0;
    for (const BenchPrompt& x : p) {
      if (x.ids.empty()) {
        ++num_text;
        CHECK(x.text == "Once upon a time");
        CHECK(x.output_len == 5);
      } else {
        CHECK(x.prompt_len == 3);
        CHECK(x.output_len == 12);
      }
    }
    CHECK((num_text == 2 || num_text == 3));
    const std::string bad = dir / "bad.jsonl";
    std::ofstream(bad) << R"({"prompt": "ok"})" "\n" R"({"text": "no prompt"})" "\n";
    CHECK_THROWS_WITH_AS(load_jsonl_prompts(bad, 1, 1, 0), doctest::Contains("bad.jsonl:2"), std::invalid_argument);
    CHECK_THROWS_AS(load_jsonl_prompts(dir / "missing.jsonl", 1, 1, 0), std::invalid_argument);
  }

  TEST_CASE("arrivals: all at once for inf; gamma gaps with mean 1/rate and variance shrinking with burstiness") {
    const auto inf = arrival_offsets(5, INFINITY, 1, 0);
    CHECK(inf == std::vector<double>(5, 0.0));
    for (double burstiness : {0.5, 1.0, 4.0}) {
      const auto t = arrival_offsets(20001, 10.0, burstiness, 3);
      CHECK(t[0] == 0);
      std::vector<double> gaps;
      for (size_t i = 1; i < t.size(); ++i) gaps.push_back(t[i] - t[i - 1]);
      const double mean = std::accumulate(gaps.begin(), gaps.end(), 0.0) / double(gaps.size());
      double var = 0;
      for (double g : gaps) var += (g - mean) * (g - mean);
      var /= double(gaps.size());
      CHECK(mean == doctest::Approx(0.1).epsilon(0.03));
      // gamma(k, 1/(rate k)): variance 1/(k rate^2)
      CHECK(var == doctest::Approx(1.0 / (burstiness * 100.0)).epsilon(0.08));
    }
    CHECK_THROWS_AS(arrival_offsets(3, 0, 1, 0), std::invalid_argument);
  }
}

// `inflight serve` on stories260K over real HTTP: greedy completions and chat, streaming and not, equal the
// golden (run.c) outputs; request options (token prompts, prompt lists, n, logprobs, echo, beams, stop,
// usage, prefix caching); 32 concurrent streams equal the same requests one at a time.
#include <doctest/doctest.h>

#include <thread>

#include "engine/generator.h"
#include "engine/model_loader.h"
#include "serve_fixture.h"
#include "server/chat_template.h"

using namespace inflight;
using namespace inflight::test;

namespace {

json greedy(json body, int max_tokens = 64) {
  body["max_tokens"] = max_tokens;
  body["temperature"] = 0;
  body["ignore_eos"] = true;
  return body;
}

}  // namespace

TEST_SUITE("serve generation") {
  TEST_CASE("greedy /v1/completions equals the golden text, for text and token-id prompts, streamed and not") {
    const uint16_t port = stories_server().port();
    for (const GoldenCase& g : golden_cases()) {
      CAPTURE(g.prompt);
      const JsonResult r = post_json(port, "/v1/completions", greedy({{"prompt", g.prompt}}));
      REQUIRE(r.status == 200);
      CHECK(r.body["object"] == "text_completion");
      CHECK(r.body["id"].get<std::string>().rfind("cmpl-", 0) == 0);
      CHECK(r.body["choices"][0]["text"] == g.generated_text);
      CHECK(r.body["choices"][0]["finish_reason"] == "length");
      CHECK(r.body["choices"][0]["logprobs"].is_null());
      CHECK(r.body["usage"]["prompt_tokens"] == g.prompt_ids.size());
      CHECK(r.body["usage"]["completion_tokens"] == 64);
      CHECK(r.body["usage"]["total_tokens"] == g.prompt_ids.size() + 64);
      CHECK(r.body["usage"]["prompt_tokens_details"]["cached_tokens"].is_number_integer());

      const JsonResult ids = post_json(port, "/v1/completions", greedy({{"prompt", g.prompt_ids}}));
      REQUIRE(ids.status == 200);
      CHECK(ids.body["choices"][0]["text"] == g.generated_text);

      const StreamResult s = post_stream(port, "/v1/completions", greedy({{"prompt", g.prompt}}));
      REQUIRE(s.status == 200);
      CHECK(s.content_type == "text/event-stream");
      CHECK(s.done);
      CHECK(stream_text(s) == g.generated_text);
      REQUIRE(!s.chunks.empty());
      CHECK(s.chunks.back()["choices"][0]["finish_reason"] == "length");
      CHECK(s.chunks.front()["object"] == "text_completion");
    }
  }

  TEST_CASE("greedy /v1/chat/completions equals the reference continuation of the templated prompt") {
    const uint16_t port = stories_server().port();
    engine::LoadedModel loaded = engine::load_model(stories_gguf());
    const server::ChatTemplate llama2(server::choose_chat_template("llama2", {}), loaded.tokenizer);
    for (const GoldenCase& g : golden_cases()) {
      if (g.prompt.empty()) continue;
      CAPTURE(g.prompt);
      server::ChatInput input;
      input.messages = {{{"role", "user"}, {"content", g.prompt}}};
      const std::vector<int32_t> ids = llama2.encode(llama2.render(input));
      const std::string expected = offline_greedy_text(ids, 48);
      const json body = greedy({{"model", "stories260K"}, {"messages", {{{"role", "user"}, {"content", g.prompt}}}}}, 48);

      const JsonResult r = post_json(port, "/v1/chat/completions", body);
      REQUIRE(r.status == 200);
      CHECK(r.body["object"] == "chat.completion");
      CHECK(r.body["choices"][0]["message"]["role"] == "assistant");
      CHECK(r.body["choices"][0]["message"]["content"] == expected);
      CHECK(r.body["usage"]["prompt_tokens"] == ids.size());

      // The same prompt as token ids through /v1/completions gives the same text.
      const JsonResult same = post_json(port, "/v1/completions", greedy({{"prompt", ids}}, 48));
      CHECK(same.body["choices"][0]["text"] == expected);

      const StreamResult s = post_stream(port, "/v1/chat/completions", body);
      REQUIRE(s.status == 200);
      CHECK(s.done);
      REQUIRE(!s.chunks.empty());
      CHECK(s.chunks.front()["object"] == "chat.completion.chunk");
      CHECK(s.chunks.front()["choices"][0]["delta"]["role"] == "assistant");
      CHECK(stream_text(s) == expected);
      CHECK(s.chunks.back()["choices"][0]["finish_reason"] == "length");
    }
  }

  TEST_CASE("a list of prompts with n > 1: choice index = prompt_index * n + i") {
    const uint16_t port = stories_server().port();
    const std::vector<GoldenCase> golden = golden_cases();
    const JsonResult r = post_json(port, "/v1/completions",
                                   greedy({{"prompt", {golden[3].prompt, golden[1].prompt}}, {"n", 2}}, 24));
    REQUIRE(r.status == 200);
    REQUIRE(r.body["choices"].size() == 4);
    for (int i = 0; i < 4; ++i) {
      const json& c = r.body["choices"][size_t(i)];
      CHECK(c["index"] == i);
      const std::string& full = golden[i < 2 ? 3 : 1].generated_text;
      CHECK(full.rfind(c["text"].get<std::string>(), 0) == 0);
      CHECK(c["text"].get<std::string>().size() > 20);
    }
    CHECK(r.body["usage"]["completion_tokens"] == 4 * 24);
  }

  TEST_CASE("logprobs in the legacy shape, with echo") {
    const uint16_t port = stories_server().port();
    const GoldenCase g = golden_cases()[1];
    const JsonResult r = post_json(port, "/v1/completions",
                                   greedy({{"prompt", g.prompt}, {"logprobs", 3}, {"echo", true}}, 8));
    REQUIRE(r.status == 200);
    const json& c = r.body["choices"][0];
    const std::string text = c["text"];
    CHECK(text.rfind(g.prompt, 0) == 0);
    CHECK(text.substr(g.prompt.size()) == g.generated_text.substr(0, text.size() - g.prompt.size()));
    const json& lp = c["logprobs"];
    const size_t num = g.prompt_ids.size() + 8;
    REQUIRE(lp["tokens"].size() == num);
    REQUIRE(lp["token_logprobs"].size() == num);
    REQUIRE(lp["top_logprobs"].size() == num);
    REQUIRE(lp["text_offset"].size() == num);
    CHECK(lp["token_logprobs"][0].is_null());
    CHECK(lp["top_logprobs"][0].is_null());
    for (size_t i = g.prompt_ids.size(); i < num; ++i) {
      CHECK(lp["token_logprobs"][i].get<double>() <= 0.0);
      CHECK(lp["top_logprobs"][i].is_object());
      CHECK(lp["top_logprobs"][i].size() >= 1);
      CHECK(lp["top_logprobs"][i].size() <= 3);
      CHECK(lp["text_offset"][i] >= lp["text_offset"][i - 1]);
    }
    // Greedy: the chosen token is the most likely one.
    const json& top = lp["top_logprobs"][g.prompt_ids.size()];
    double best = -1e9;
    for (auto it = top.begin(); it != top.end(); ++it) best = std::max(best, it.value().get<double>());
    CHECK(lp["token_logprobs"][g.prompt_ids.size()].get<double>() == doctest::Approx(best));
  }

  TEST_CASE("chat logprobs, stop strings, beam search, include_usage, cached prompt tokens") {
    const uint16_t port = stories_server().port();
    const json messages = {{{"role", "system"}, {"content", "Tell a story."}}, {{"role", "user"}, {"content", "The cat"}}};
    const JsonResult chat = post_json(port, "/v1/chat/completions",
                                      greedy({{"messages", messages}, {"logprobs", true}, {"top_logprobs", 2}}, 6));
    REQUIRE(chat.status == 200);
    const json& content = chat.body["choices"][0]["logprobs"]["content"];
    REQUIRE(content.size() == 6);
    CHECK(content[0]["token"].is_string());
    CHECK(content[0]["bytes"].is_array());
    CHECK(content[0]["top_logprobs"].size() == 2);

    const JsonResult stop = post_json(port, "/v1/completions", greedy({{"prompt", "Once upon a time"}, {"stop", {"."}}}));
    REQUIRE(stop.status == 200);
    CHECK(stop.body["choices"][0]["finish_reason"] == "stop");
    CHECK(stop.body["choices"][0]["text"] == ", there was a little girl named Lily");

    const JsonResult beams = post_json(port, "/v1/completions",
                                       {{"prompt", "The cat"}, {"max_tokens", 8}, {"n", 2}, {"use_beam_search", true}});
    REQUIRE(beams.status == 200);
    REQUIRE(beams.body["choices"].size() == 2);
    CHECK(!beams.body["choices"][0]["text"].get<std::string>().empty());
    const StreamResult beam_stream = post_stream(port, "/v1/completions",
                                                 {{"prompt", "The cat"}, {"max_tokens", 8}, {"n", 2}, {"use_beam_search", true}});
    CHECK(beam_stream.done);
    CHECK(stream_text(beam_stream, 0) == beams.body["choices"][0]["text"]);
    CHECK(stream_text(beam_stream, 1) == beams.body["choices"][1]["text"]);

    const StreamResult usage = post_stream(port, "/v1/completions",
                                           greedy({{"prompt", "The cat"}, {"stream_options", {{"include_usage", true}}}}, 5));
    REQUIRE(usage.done);
    REQUIRE(usage.chunks.size() >= 2);
    CHECK(usage.chunks.back()["choices"].empty());
    CHECK(usage.chunks.back()["usage"]["completion_tokens"] == 5);
    CHECK(usage.chunks.front()["usage"].is_null());

    // A prompt longer than one KV block, twice: the second finds its full blocks in the prefix cache.
    const std::string long_prompt = golden_cases()[1].generated_text;
    post_json(port, "/v1/completions", greedy({{"prompt", long_prompt}}, 2));
    const JsonResult again = post_json(port, "/v1/completions", greedy({{"prompt", long_prompt}}, 2));
    REQUIRE(again.status == 200);
    CHECK(again.body["usage"]["prompt_tokens_details"]["cached_tokens"] >= 16);
  }

  TEST_CASE("32 concurrent streaming clients get exactly what they get one at a time") {
    const uint16_t port = stories_server().port();
    const std::vector<GoldenCase> golden = golden_cases();
    std::vector<json> requests;
    for (int i = 0; i < 32; ++i) {
      json body = {{"prompt", golden[size_t(i) % golden.size()].prompt}, {"max_tokens", 16 + (i * 7) % 48}, {"ignore_eos", true}};
      if (i % 2 == 0) body["temperature"] = 0;
      else body.update({{"temperature", 0.9}, {"top_p", 0.95}, {"seed", 1000 + i}});  // seeded sampling
      requests.push_back(body);
    }
    std::vector<std::string> alone(32);
    for (size_t i = 0; i < 32; ++i) {
      const StreamResult r = post_stream(port, "/v1/completions", requests[i]);
      REQUIRE(r.status == 200);
      REQUIRE(r.done);
      alone[i] = stream_text(r);
      CHECK(!alone[i].empty());
    }
    std::vector<StreamResult> together(32);
    std::vector<std::thread> clients;
    for (size_t i = 0; i < 32; ++i)
      clients.emplace_back([&, i] { together[i] = post_stream(port, "/v1/completions", requests[i]); });
    for (std::thread& t : clients) t.join();
    for (size_t i = 0; i < 32; ++i) {
      CAPTURE(i);
      CHECK(together[i].status == 200);
      CHECK(together[i].done);
      CHECK(stream_text(together[i]) == alone[i]);
    }
  }

  TEST_CASE("GET /v1/models, /health and /metrics") {
    const uint16_t port = stories_server().port();
    const HttpResult models = http_request(port, "GET", "/v1/models");
    REQUIRE(models.status == 200);
    const json m = json::parse(models.body);
    CHECK(m["object"] == "list");
    CHECK(m["data"][0]["id"] == "stories260K");
    CHECK(m["data"][0]["max_model_len"] == 512);
    CHECK(http_request(port, "GET", "/v1/models/stories260K").status == 200);

    const HttpResult health = http_request(port, "GET", "/health");
    CHECK(health.status == 200);

    const HttpResult metrics = http_request(port, "GET", "/metrics");
    REQUIRE(metrics.status == 200);
    CHECK(metrics.header("content-type").rfind("text/plain", 0) == 0);
    for (const char* series :
         {"# TYPE inflight_requests_total counter", "inflight_requests_total{finish_reason=\"length\"}",
          "# TYPE inflight_prompt_tokens_total counter", "# TYPE inflight_generation_tokens_total counter",
          "# TYPE inflight_preemptions_total counter", "# TYPE inflight_prefix_cache_queries_total counter",
          "# TYPE inflight_prefix_cache_hits_total counter", "# TYPE inflight_num_requests_running gauge",
          "# TYPE inflight_num_requests_waiting gauge", "# TYPE inflight_kv_cache_usage_ratio gauge",
          "# TYPE inflight_time_to_first_token_seconds histogram", "inflight_time_to_first_token_seconds_bucket{le=\"+Inf\"}",
          "# TYPE inflight_inter_token_latency_seconds histogram", "# TYPE inflight_e2e_request_latency_seconds histogram",
          "# TYPE inflight_request_queue_time_seconds histogram", "inflight_e2e_request_latency_seconds_count"}) {
      CAPTURE(series);
      CHECK(metrics.body.find(series) != std::string::npos);
    }
    CHECK(metric_value(metrics.body, "inflight_generation_tokens_total") > 0);
  }
}

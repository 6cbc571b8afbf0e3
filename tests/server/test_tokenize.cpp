// POST /tokenize and /detokenize (vLLM's shapes) on the real server: stories260K (sentencepiece), and
// models made by `inflight make-model --tokenizer` from a byte-level BPE tokenizer.json (Hugging Face
// folder and GGUF), which serve chat completions through the model's own ChatML template.
#include <doctest/doctest.h>

#include "serve_fixture.h"
#include "tiny_tokenizer.h"

using namespace inflight::test;

namespace {

void check_error(const JsonResult& r, int status, const std::string& param) {
  CAPTURE(r.http.body);
  CHECK(r.status == status);
  check_error_envelope(r.body);
  if (!param.empty()) CHECK(r.body["error"]["param"] == param);
}

}  // namespace

TEST_SUITE("tokenize") {
  TEST_CASE("/tokenize and /detokenize on stories260K: the golden prompt ids, special tokens, token strings") {
    const uint16_t port = stories_server().port();
    for (const GoldenCase& c : golden_cases()) {
      if (c.prompt.empty()) continue;
      CAPTURE(c.prompt);
      const JsonResult r = post_json(port, "/tokenize", {{"prompt", c.prompt}});
      REQUIRE(r.status == 200);
      CHECK(r.body["tokens"].get<std::vector<int32_t>>() == c.prompt_ids);
      CHECK(r.body["count"] == c.prompt_ids.size());
      CHECK(r.body["max_model_len"] == 512);
      CHECK(r.body["token_strs"].is_null());
      const JsonResult d = post_json(port, "/detokenize", {{"tokens", c.prompt_ids}});
      REQUIRE(d.status == 200);
      CHECK(d.body["prompt"] == c.prompt);
    }
    const JsonResult plain = post_json(port, "/tokenize",
                                       {{"model", stories_gguf()}, {"prompt", "Once upon a time"},
                                        {"add_special_tokens", false}, {"return_token_strs", true}});
    REQUIRE(plain.status == 200);
    CHECK(plain.body["tokens"] == json({403, 407, 261, 378}));
    CHECK(plain.body["token_strs"] == json({"▁Once", "▁upon", "▁a", "▁time"}));
    CHECK(post_json(port, "/detokenize", {{"tokens", json::array()}}).body["prompt"] == "");
  }

  TEST_CASE("/tokenize with messages gives the prompt chat completions run") {
    const uint16_t port = stories_server().port();
    const json messages = {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Tell a story"}}};
    const JsonResult t = post_json(port, "/tokenize", {{"messages", messages}});
    REQUIRE(t.status == 200);
    const JsonResult chat = post_json(port, "/v1/chat/completions", {{"messages", messages}, {"max_tokens", 1}});
    REQUIRE(chat.status == 200);
    CHECK(t.body["count"] == chat.body["usage"]["prompt_tokens"]);
    CHECK(t.body["tokens"][0] == 1);  // BOS
    // add_generation_prompt reaches the template as in chat completions: off, the prompt is no longer.
    const JsonResult no_gen = post_json(port, "/tokenize", {{"messages", messages}, {"add_generation_prompt", false}});
    REQUIRE(no_gen.status == 200);
    CHECK(no_gen.body["count"].get<int>() <= t.body["count"].get<int>());
  }

  TEST_CASE("/tokenize and /detokenize errors: 400 naming the field, 404 for another model, 405 for GET") {
    const uint16_t port = stories_server().port();
    check_error(post_json(port, "/tokenize", json::object()), 400, "prompt");
    check_error(post_json(port, "/tokenize", {{"prompt", "a"}, {"messages", json::array()}}), 400, "");
    check_error(post_json(port, "/tokenize", {{"prompt", json::array({1, 2})}}), 400, "prompt");
    check_error(post_json(port, "/tokenize", {{"prompt", "a"}, {"add_special_tokens", "yes"}}), 400, "add_special_tokens");
    check_error(post_json(port, "/tokenize", {{"messages", "hi"}}), 400, "messages");
    check_error(post_json(port, "/tokenize", {{"model", "other"}, {"prompt", "a"}}), 404, "model");
    check_error(post_json(port, "/detokenize", json::object()), 400, "tokens");
    check_error(post_json(port, "/detokenize", {{"tokens", {1, 512}}}), 400, "tokens");
    check_error(post_json(port, "/detokenize", {{"tokens", {1, -1}}}), 400, "tokens");
    check_error(post_json(port, "/detokenize", {{"tokens", {"a"}}}), 400, "tokens");
    const HttpResult bad = http_request(port, "POST", "/tokenize", "{\"prompt\": ");
    CHECK(bad.status == 400);
    // A lone surrogate cannot be text: the JSON is refused, the server stays up.
    CHECK(http_request(port, "POST", "/tokenize", "{\"prompt\": \"a\\ud800b\"}").status == 400);
    CHECK(http_request(port, "GET", "/tokenize").status == 405);
    CHECK(http_request(port, "GET", "/health").status == 200);
  }

  TEST_CASE("models made with make-model --tokenizer (HF folder and GGUF) serve /tokenize and chat") {
    TempDir dir("tokenize");
    const int n = write_tiny_byte_level_tokenizer(dir.path / "tok");
    for (const char* format : {"hf", "gguf"}) {
      CAPTURE(format);
      const std::string out = dir / (std::string("model-") + format);
      const CommandResult made = run_inflight("make-model --preset tiny --layers 2 --dtype f32 --tokenizer " +
                                              (dir.path / "tok").string() + " --format " + format + " -o " + out);
      REQUIRE_MESSAGE(made.status == 0, made.output);
      ServerProcess server({"--model", out, "--kv-cache-memory", "16M"});
      REQUIRE_MESSAGE(server.wait_ready(), server.log());
      const uint16_t port = server.port();
      const JsonResult t = post_json(port, "/tokenize", {{"prompt", "Hello world<|im_end|>"}, {"return_token_strs", true}});
      REQUIRE(t.status == 200);
      REQUIRE(t.body["tokens"].size() == 3);
      CHECK(t.body["tokens"][2] == n - 2);
      CHECK(t.body["token_strs"] == json({"Hello", "Ġworld", "<|im_end|>"}));
      CHECK(post_json(port, "/detokenize", {{"tokens", t.body["tokens"]}}).body["prompt"] == "Hello world");
      const json messages = {{{"role", "user"}, {"content", "Hello"}}};
      const JsonResult tm = post_json(port, "/tokenize", {{"messages", messages}});
      REQUIRE(tm.status == 200);
      // <|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n
      CHECK(tm.body["tokens"][0] == n - 3);
      CHECK(tm.body["tokens"][7] == n - 2);
      const JsonResult chat = post_json(port, "/v1/chat/completions",
                                        {{"messages", messages}, {"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true}});
      REQUIRE_MESSAGE(chat.status == 200, chat.http.body);
      CHECK(chat.body["usage"]["prompt_tokens"] == tm.body["count"]);
      CHECK(chat.body["usage"]["completion_tokens"] == 8);
      CHECK(chat.body["choices"][0]["message"]["content"].is_string());
    }
  }
}

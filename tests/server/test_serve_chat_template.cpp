// `inflight serve --chat-template FILE` over HTTP: tools, chat_template_kwargs, add_generation_prompt and
// tool messages reach the template (the prompt is exactly the expected rendered text: same token count and
// greedy text as that text through /v1/completions); a template that raises is a 400 with its message.
#include <doctest/doctest.h>

#include <fstream>

#include "chat_template_support.h"
#include "serve_fixture.h"

using namespace inflight::test;

namespace {

// Plain text (no control pieces), so that /v1/completions encodes the expected rendering the same way.
constexpr const char* kTemplate = R"({%- if messages[0].content == 'boom' -%}
    {{- raise_exception('this template refuses booms') -}}
{%- endif -%}
{%- for m in messages -%}
    {{- m.role }}: {{ m.content if m.content is string else '' }}
{% if m.tool_calls %}{% for c in m.tool_calls %}calls {{ c.function.name }}({{ c.function.arguments }})
{% endfor %}{% endif -%}
{%- endfor -%}
{%- if tools %}tools: {{ tools | map(attribute='function.name') | join(', ') }}; first {{ tools[0] | tojson }}
{% endif -%}
{%- if mood is defined %}mood: {{ mood }}
{% endif -%}
{%- if add_generation_prompt %}assistant:{% endif -%})";

struct TemplateServer {
  TempDir dir{"serve-chat-template"};
  std::unique_ptr<ServerProcess> server;

  TemplateServer() {
    std::ofstream(dir / "chat.jinja") << kTemplate;
    server = std::make_unique<ServerProcess>(std::vector<std::string>{
        "--model", stories_gguf(), "--kv-cache-memory", "64M", "--chat-template", dir / "chat.jinja"});
    REQUIRE_MESSAGE(server->wait_ready(), server->log());
  }
};

json greedy_chat(json body) {
  body["temperature"] = 0;
  body["max_tokens"] = 12;
  return body;
}

}  // namespace

TEST_SUITE("serve chat template") {
  TEST_CASE("tools, chat_template_kwargs, tool messages and add_generation_prompt reach the template") {
    TemplateServer ts;
    const uint16_t port = ts.server->port();
    const json tool = json::parse(R"({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}})");
    const json body = greedy_chat({
        {"messages",
         {{{"role", "user"}, {"content", "Weather in Paris?"}},
          {{"role", "assistant"}, {"content", nullptr},
           {"tool_calls", {{{"id", "c1"}, {"type", "function"},
                            {"function", {{"name", "get_weather"}, {"arguments", "{\"city\": \"Paris\"}"}}}}}}},
          {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "22 C"}}}},
        {"tools", {tool}},
        {"tool_choice", "auto"},
        {"chat_template_kwargs", {{"mood", "sunny"}}},
    });
    // The key order of the client's tool is kept ("type" before "function"), as tojson shows it.
    const std::string expected =
        "user: Weather in Paris?\nassistant: \ncalls get_weather({\"city\": \"Paris\"})\ntool: 22 C\n"
        "tools: get_weather; first {\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": "
        "{\"type\": \"object\"}}}\nmood: sunny\nassistant:";
    // A raw body keeps the key order as written (json objects here would be sorted by key).
    const std::string raw = R"({"messages": )" + body["messages"].dump() +
                            R"(, "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}],)"
                            R"( "tool_choice": "auto", "chat_template_kwargs": {"mood": "sunny"}, "temperature": 0, "max_tokens": 12})";
    const HttpResult chat = http_request(port, "POST", "/v1/chat/completions", raw);
    REQUIRE_MESSAGE(chat.status == 200, chat.body);
    const json chat_body = json::parse(chat.body);
    const JsonResult plain = post_json(port, "/v1/completions", {{"prompt", expected}, {"temperature", 0}, {"max_tokens", 12}});
    REQUIRE(plain.status == 200);
    CHECK(chat_body["usage"]["prompt_tokens"] == plain.body["usage"]["prompt_tokens"]);
    CHECK(chat_body["choices"][0]["message"]["content"] == plain.body["choices"][0]["text"]);

    // add_generation_prompt: false leaves the turn unopened.
    json no_prompt = greedy_chat({{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"add_generation_prompt", false}});
    const JsonResult r = post_json(port, "/v1/chat/completions", no_prompt);
    REQUIRE(r.status == 200);
    const JsonResult same = post_json(port, "/v1/completions", {{"prompt", "user: Hi\n"}, {"temperature", 0}, {"max_tokens", 12}});
    CHECK(r.body["usage"]["prompt_tokens"] == same.body["usage"]["prompt_tokens"]);
    CHECK(r.body["choices"][0]["message"]["content"] == same.body["choices"][0]["text"]);
  }

  TEST_CASE("a template that raises, and bad template inputs, are 400s naming the field") {
    TemplateServer ts;
    const uint16_t port = ts.server->port();
    const JsonResult boom = post_json(port, "/v1/chat/completions", greedy_chat({{"messages", {{{"role", "user"}, {"content", "boom"}}}}}));
    CHECK(boom.status == 400);
    CHECK(boom.body["error"]["type"] == "invalid_request_error");
    CHECK(boom.body["error"]["param"] == "messages");
    CHECK(boom.body["error"]["message"].get<std::string>().find("this template refuses booms") != std::string::npos);

    auto check_400 = [&](json body, const char* param) {
      const JsonResult r = post_json(port, "/v1/chat/completions", greedy_chat(std::move(body)));
      CHECK_MESSAGE(r.status == 400, r.http.body);
      CHECK(r.body["error"]["param"] == param);
    };
    const json hi = {{{"role", "user"}, {"content", "hi"}}};
    check_400({{"messages", hi}, {"chat_template_kwargs", "thinking"}}, "chat_template_kwargs");
    check_400({{"messages", hi}, {"tools", {1, 2}}}, "tools");
    check_400({{"messages", hi}, {"tools", "get_weather"}}, "tools");
    check_400({{"messages", hi}, {"tool_choice", "required"}}, "tool_choice");
    check_400({{"messages", hi}, {"add_generation_prompt", "yes"}}, "add_generation_prompt");
    check_400({{"messages", {{{"role", "user"}, {"content", "x"}, {"tool_calls", json::array()}}}}}, "messages");
    check_400({{"messages", {{{"role", "tool"}}}}}, "messages");
    // The server is still well.
    CHECK(http_request(port, "GET", "/health").status == 200);
  }

  TEST_CASE("auto serves the model's own template (GGUF tokenizer.chat_template); a broken one falls back to llama2") {
    TempDir dir("serve-model-template");
    write_stories_with_chat_template(dir / "own.gguf", "{% for m in messages %}{{ m.role | upper }} says: {{ m.content }}\n"
                                                       "{% endfor %}{% if add_generation_prompt %}ASSISTANT says:{% endif %}");
    ServerProcess own({"--model", dir / "own.gguf", "--kv-cache-memory", "64M"});
    REQUIRE_MESSAGE(own.wait_ready(), own.log());
    const JsonResult chat = post_json(own.port(), "/v1/chat/completions",
                                      greedy_chat({{"messages", {{{"role", "system"}, {"content", "Tell a story."}},
                                                                 {{"role", "user"}, {"content", "The cat"}}}}}));
    REQUIRE_MESSAGE(chat.status == 200, chat.http.body);
    const JsonResult plain = post_json(own.port(), "/v1/completions",
                                       {{"prompt", "SYSTEM says: Tell a story.\nUSER says: The cat\nASSISTANT says:"},
                                        {"temperature", 0}, {"max_tokens", 12}});
    CHECK(chat.body["usage"]["prompt_tokens"] == plain.body["usage"]["prompt_tokens"]);
    CHECK(chat.body["choices"][0]["message"]["content"] == plain.body["choices"][0]["text"]);
    CHECK(own.log().find("chat template: the model's") != std::string::npos);

    // A model template the engine cannot parse: a warning, and the built-in llama2 serves.
    write_stories_with_chat_template(dir / "broken.gguf", "{% for m in messages %}");
    ServerProcess broken({"--model", dir / "broken.gguf", "--kv-cache-memory", "64M"});
    REQUIRE_MESSAGE(broken.wait_ready(), broken.log());
    CHECK(broken.log().find("does not parse") != std::string::npos);
    const JsonResult fallback = post_json(broken.port(), "/v1/chat/completions",
                                          greedy_chat({{"messages", {{{"role", "user"}, {"content", "The cat"}}}}}));
    CHECK(fallback.status == 200);
  }

  TEST_CASE("a template file that does not parse stops start-up, naming the line") {
    TempDir dir("serve-bad-template");
    std::ofstream(dir / "bad.jinja") << "{% for m in messages %}\n{{ m.content }}";
    ServerProcess s({"--model", stories_gguf(), "--kv-cache-memory", "64M", "--chat-template", dir / "bad.jinja"});
    const std::optional<int> code = s.wait_exit(30);
    REQUIRE(code.has_value());
    CHECK(*code != 0);
    CHECK(s.log().find("expected 'endfor' (the block opened on line 1)") != std::string::npos);
  }
}

// Tool calls over real HTTP on stories260K (a model that knows nothing of tools): with tool_choice required or
// naming a tool, sampled at temperature 1 over several seeds, every answer is finish_reason "tool_calls" with
// valid tool_calls whose arguments fit the tool's parameters (checked by hand), in each format (the built-in
// llama2 template gives the generic one; template files mentioning <tool_call>, <|python_tag|> and
// [TOOL_CALLS] give Hermes, Llama 3 and Mistral); streamed deltas reassemble to the same calls; auto leaves
// text as text; bad tools and tool_choice are 400s naming the field; a conversation holding a call and its
// result reaches the template.
#include <doctest/doctest.h>

#include <map>

#include "serve_fixture.h"

using namespace inflight;
using namespace inflight::test;

namespace {

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "The weather of a city",
   "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10},
                  "unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "get_time",
   "parameters": {"type": "object", "properties": {"hour": {"type": "integer", "minimum": 0, "maximum": 23}},
                  "required": ["hour"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "ping",
   "parameters": {"type": "object", "properties": {}, "additionalProperties": false}}}
])");

size_t utf8_length(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// The arguments of a call to `name` checked against kTools' schemas by hand.
void check_arguments(const std::string& name, const std::string& arguments) {
  CAPTURE(name);
  CAPTURE(arguments);
  const json a = json::parse(arguments, nullptr, false);
  REQUIRE(a.is_object());
  if (name == "get_weather") {
    CHECK(a.size() == 2);
    REQUIRE(a.contains("city"));
    REQUIRE(a["city"].is_string());
    CHECK(utf8_length(a["city"].get<std::string>()) <= 10);
    CHECK((a.value("unit", "") == "c" || a.value("unit", "") == "f"));
  } else if (name == "get_time") {
    CHECK(a.size() == 1);
    REQUIRE(a.contains("hour"));
    REQUIRE(a["hour"].is_number_integer());
    CHECK((a["hour"].get<int>() >= 0 && a["hour"].get<int>() <= 23));
  } else if (name == "n") {
    CHECK(a.size() == 1);
    REQUIRE(a.contains("n"));
    REQUIRE(a["n"].is_number_integer());
    CHECK((a["n"].get<int>() >= 0 && a["n"].get<int>() <= 9));
  } else {
    CHECK(name == "ping");
    CHECK(a.empty());
  }
}

// A message's tool_calls: each valid; returns [(name, arguments)].
std::vector<std::pair<std::string, std::string>> check_tool_calls(const json& calls) {
  std::vector<std::pair<std::string, std::string>> out;
  REQUIRE(calls.is_array());
  REQUIRE(!calls.empty());
  for (const json& c : calls) {
    CAPTURE(c.dump());
    REQUIRE(c["id"].is_string());
    CHECK(c["id"].get<std::string>().rfind("call_", 0) == 0);
    CHECK(c["type"] == "function");
    REQUIRE(c["function"]["name"].is_string());
    REQUIRE(c["function"]["arguments"].is_string());
    check_arguments(c["function"]["name"], c["function"]["arguments"]);
    out.emplace_back(c["function"]["name"], c["function"]["arguments"]);
  }
  return out;
}

json tool_request(json tool_choice, int seed, bool parallel = true) {
  return {{"messages", {{{"role", "user"}, {"content", "What is the weather in Paris?"}}}},
          {"tools", kTools},
          {"tool_choice", std::move(tool_choice)},
          {"parallel_tool_calls", parallel},
          {"temperature", 1},
          {"seed", seed},
          {"max_tokens", 400}};
}

// tool_choice required with parallel calls, over two short tools: a call is about 50 tokens of stories260K's
// vocabulary, and it goes on calling up to the most calls of an answer (tool_calls.h).
json parallel_request(int seed) {
  json body = tool_request("required", seed, true);
  body["tools"] = {kTools[2], json::parse(R"({"type": "function", "function": {"name": "n", "parameters": {"type": "object",
                    "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}}, "required": ["n"],
                    "additionalProperties": false}}})")};
  body["max_tokens"] = 480;
  return body;
}

json named(const char* name) { return {{"type", "function"}, {"function", {{"name", name}}}}; }

// The calls of choice 0 of a stream, from its tool_calls deltas; checks their shape on the way.
std::vector<std::pair<std::string, std::string>> streamed_calls(const StreamResult& r, std::string* finish_reason) {
  std::map<int, std::pair<std::string, std::string>> calls;
  for (const json& chunk : r.chunks) {
    for (const json& choice : chunk["choices"]) {
      if (!choice["finish_reason"].is_null()) *finish_reason = choice["finish_reason"];
      const json& delta = choice["delta"];
      if (!delta.contains("tool_calls")) continue;
      for (const json& d : delta["tool_calls"]) {
        const int index = d["index"];
        if (!calls.count(index)) {  // a call's first delta: id, type and name
          CHECK(d["id"].get<std::string>().rfind("call_", 0) == 0);
          CHECK(d["type"] == "function");
          CHECK(d["function"]["name"].is_string());
          CHECK(d["function"]["arguments"] == "");
          calls[index].first = d["function"]["name"];
        } else {
          CHECK(!d.contains("id"));
        }
        if (d["function"].contains("arguments")) calls[index].second += d["function"]["arguments"].get<std::string>();
      }
    }
  }
  std::vector<std::pair<std::string, std::string>> out;
  for (auto& [index, call] : calls) {
    CHECK(index == int(out.size()));
    out.push_back(call);
  }
  return out;
}

// Required and named calls over seeds on `port`, and a stream of each against its plain answer.
void check_forced_calls(uint16_t port) {
  for (int seed = 1; seed <= 6; ++seed) {
    CAPTURE(seed);
    // A named tool: one call to it.
    JsonResult r = post_json(port, "/v1/chat/completions", tool_request(named("get_weather"), seed));
    REQUIRE_MESSAGE(r.status == 200, r.http.body);
    const json& choice = r.body["choices"][0];
    CHECK(choice["finish_reason"] == "tool_calls");
    CHECK(choice["message"]["role"] == "assistant");
    CHECK(choice["message"]["content"].is_null());
    auto calls = check_tool_calls(choice["message"]["tool_calls"]);
    REQUIRE(calls.size() == 1);
    CHECK(calls[0].first == "get_weather");

    // Required, one call: any tool.
    r = post_json(port, "/v1/chat/completions", tool_request("required", seed, false));
    REQUIRE_MESSAGE(r.status == 200, r.http.body);
    CHECK(r.body["choices"][0]["finish_reason"] == "tool_calls");
    calls = check_tool_calls(r.body["choices"][0]["message"]["tool_calls"]);
    CHECK(calls.size() == 1);

    // Required with parallel calls: one or more, each valid.
    r = post_json(port, "/v1/chat/completions", parallel_request(seed));
    REQUIRE_MESSAGE(r.status == 200, r.http.body);
    CHECK(r.body["choices"][0]["finish_reason"] == "tool_calls");
    calls = check_tool_calls(r.body["choices"][0]["message"]["tool_calls"]);
    CHECK((calls.size() >= 1 && calls.size() <= 8));
  }
  // Streamed: the deltas reassemble to the calls of the same seed's plain answer.
  for (int seed : {3, 4}) {
    for (const json& body : {tool_request(named("get_time"), seed), tool_request("required", seed, false), parallel_request(seed)}) {
      const JsonResult plain = post_json(port, "/v1/chat/completions", body);
      REQUIRE(plain.status == 200);
      const auto expected = check_tool_calls(plain.body["choices"][0]["message"]["tool_calls"]);
      const StreamResult s = post_stream(port, "/v1/chat/completions", body);
      REQUIRE(s.status == 200);
      CHECK(s.done);
      std::string finish_reason;
      CHECK(streamed_calls(s, &finish_reason) == expected);
      CHECK(finish_reason == "tool_calls");
      CHECK(stream_text(s).empty());
    }
  }
}

struct TemplateServer {
  TempDir dir{"serve-tools"};
  std::unique_ptr<ServerProcess> server;

  explicit TemplateServer(const std::string& source) {
    std::ofstream(dir / "chat.jinja") << source;
    server = std::make_unique<ServerProcess>(std::vector<std::string>{
        "--model", stories_gguf(), "--kv-cache-memory", "64M", "--chat-template", dir / "chat.jinja"});
    REQUIRE_MESSAGE(server->wait_ready(), server->log());
  }
};

// A Hermes-style template (plain text, no control pieces): tools, calls and tool results rendered. Rendered
// with trim_blocks, as transformers does: the newline after a block tag is dropped.
constexpr const char* kHermesTemplate = R"({%- if tools %}tools: {{ tools | map(attribute='function.name') | join(', ') }}
{% endif -%}
{%- for m in messages -%}
{{- m.role }}: {{ m.content if m.content is string else '' }}
{%- if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>
{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments }}}
</tool_call>{% endfor %}{% endif %}
{%- if m.tool_call_id %} (result of {{ m.tool_call_id }}){% endif %}{{ '\n' }}
{%- endfor -%}
{%- if add_generation_prompt %}assistant:{% endif -%})";

}  // namespace

TEST_SUITE("serve tools") {
  TEST_CASE("generic format (the built-in llama2 template): forced calls fit their tools, streamed the same") {
    check_forced_calls(stories_server().port());
  }

  TEST_CASE("Hermes, Llama 3 and Mistral formats, picked from the template") {
    SUBCASE("hermes") {
      TemplateServer ts(kHermesTemplate);
      check_forced_calls(ts.server->port());
      // The text of a call is the Hermes form.
      const JsonResult r = post_json(ts.server->port(), "/v1/chat/completions",
                                     tool_request(named("ping"), 1));
      REQUIRE(r.status == 200);
      CHECK(r.body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == "{}");
    }
    SUBCASE("llama3") {
      TemplateServer ts("{# <|python_tag|> #}{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}assistant:");
      check_forced_calls(ts.server->port());
    }
    SUBCASE("mistral") {
      TemplateServer ts("{# [TOOL_CALLS] #}{% for m in messages %}[INST] {{ m.content }} [/INST]{% endfor %}");
      check_forced_calls(ts.server->port());
    }
  }

  TEST_CASE("n > 1: every choice is a call, streamed per choice") {
    const uint16_t port = stories_server().port();
    json body = tool_request(named("get_weather"), 9);
    body["n"] = 3;
    const JsonResult r = post_json(port, "/v1/chat/completions", body);
    REQUIRE_MESSAGE(r.status == 200, r.http.body);
    REQUIRE(r.body["choices"].size() == 3);
    for (const json& c : r.body["choices"]) {
      CHECK(c["finish_reason"] == "tool_calls");
      const auto calls = check_tool_calls(c["message"]["tool_calls"]);
      REQUIRE(calls.size() == 1);
      CHECK(calls[0].first == "get_weather");
    }
    const StreamResult s = post_stream(port, "/v1/chat/completions", body);
    REQUIRE(s.status == 200);
    CHECK(s.done);
    std::map<int, int> heads;  // choice -> first deltas of calls
    std::map<int, std::string> finish;
    for (const json& chunk : s.chunks)
      for (const json& c : chunk["choices"]) {
        if (!c["finish_reason"].is_null()) finish[c["index"]] = c["finish_reason"];
        if (c["delta"].contains("tool_calls") && c["delta"]["tool_calls"][0].contains("id")) heads[c["index"]]++;
      }
    for (int i = 0; i < 3; ++i) {
      CHECK(heads[i] == 1);
      CHECK(finish[i] == "tool_calls");
    }
  }

  TEST_CASE("auto and none: the answer stays text when it holds no call") {
    const uint16_t port = stories_server().port();
    for (const char* choice : {"auto", "none"}) {
      json body = tool_request(choice, 5);
      body["max_tokens"] = 24;
      const JsonResult r = post_json(port, "/v1/chat/completions", body);
      REQUIRE_MESSAGE(r.status == 200, r.http.body);
      const json& c = r.body["choices"][0];
      CHECK(c["message"]["content"].is_string());
      CHECK(!c["message"].contains("tool_calls"));
      CHECK(c["finish_reason"] != "tool_calls");
      // Streamed: the same text as content.
      const StreamResult s = post_stream(port, "/v1/chat/completions", body);
      REQUIRE(s.status == 200);
      CHECK(stream_text(s) == c["message"]["content"].get<std::string>());
    }
  }

  TEST_CASE("a conversation with a call and its result reaches the template") {
    TemplateServer ts(kHermesTemplate);
    json body = tool_request(named("get_time"), 2);
    body["messages"] = json::parse(R"([
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"c\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "22"},
      {"role": "user", "content": "And the time?"}])");
    const JsonResult r = post_json(ts.server->port(), "/v1/chat/completions", body);
    REQUIRE_MESSAGE(r.status == 200, r.http.body);
    CHECK(r.body["choices"][0]["finish_reason"] == "tool_calls");
    // The prompt is the rendering: its token count matches the same text through /v1/completions.
    const std::string rendered =
        "tools: get_weather, get_time, ping\nuser: Weather in Paris?\nassistant: <tool_call>\n{\"name\": \"get_weather\", "
        "\"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>\ntool: 22 (result of call_1)\nuser: And the "
        "time?\nassistant:";
    const JsonResult plain = post_json(ts.server->port(), "/v1/completions", {{"prompt", rendered}, {"max_tokens", 1}});
    REQUIRE(plain.status == 200);
    CHECK(r.body["usage"]["prompt_tokens"] == plain.body["usage"]["prompt_tokens"]);
  }

  TEST_CASE("bad tools and tool_choice are 400s naming the field") {
    const uint16_t port = stories_server().port();
    auto check_400 = [&](json body, const char* param) {
      const JsonResult r = post_json(port, "/v1/chat/completions", body);
      CHECK_MESSAGE(r.status == 400, r.http.body);
      check_error_envelope(r.body);
      CHECK(r.body["error"]["param"] == param);
    };
    check_400(tool_request(named("get_wether"), 1), "tool_choice");
    check_400(tool_request("sometimes", 1), "tool_choice");
    check_400(tool_request(json{{"type", "function"}}, 1), "tool_choice");
    json body = tool_request("required", 1);
    body["tools"].push_back(kTools[0]);
    check_400(body, "tools");  // a name twice
    body = tool_request("auto", 1);
    body["tools"][1]["type"] = "code_interpreter";
    check_400(body, "tools");
    body = tool_request("auto", 1);
    body["tools"][0]["function"].erase("name");
    check_400(body, "tools");
    body = tool_request("required", 1);
    body["tools"][0]["function"]["parameters"] = {{"type", "strange"}};
    check_400(body, "tools");  // a schema the grammar compiler refuses
    body = tool_request("required", 1);
    body["response_format"] = {{"type", "json_object"}};
    check_400(body, "tool_choice");  // two constraints
    body = tool_request("required", 1);
    body["parallel_tool_calls"] = "yes";
    check_400(body, "parallel_tool_calls");
    body = tool_request("required", 1);
    body.erase("tools");
    check_400(body, "tool_choice");
    CHECK(http_request(port, "GET", "/health").status == 200);
  }
}

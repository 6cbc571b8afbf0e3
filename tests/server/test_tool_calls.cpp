// server/tool_calls.cpp: the format picked from a template's source, each format's parser on real call texts
// (content before, several calls, arguments as a string, what is not a call), the streaming hold-back point,
// the grammar's language through the real matcher (valid calls accepted and complete, wrong names, arguments
// outside the schema and wrong wrappers refused), rule prefixing, and the request fields' 400s.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/grammar/grammar.h"
#include "engine/grammar/matcher.h"
#include "server/api_error.h"
#include "server/tool_calls.h"

using namespace inflight::server;
namespace grammar = inflight::engine::grammar;
using nlohmann::json;
using nlohmann::ordered_json;

namespace {

std::shared_ptr<const grammar::TokenVocab> single_bytes() {
  static const auto vocab = [] {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.emplace_back(1, char(b));
    return std::make_shared<const grammar::TokenVocab>(std::move(tokens), -1);
  }();
  return vocab;
}

// Whether the grammar's language holds `text` (all of it accepted, and complete there).
bool accepts(const std::shared_ptr<const grammar::Grammar>& g, std::string_view text) {
  grammar::Matcher m(g, single_bytes());
  return m.accept_bytes(text) && m.can_end();
}

const ordered_json kWeather = ordered_json::parse(R"({"type": "function", "function": {"name": "get_weather",
  "description": "Weather of a city", "parameters": {"type": "object", "properties": {
  "city": {"type": "string", "maxLength": 10}, "unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"],
  "additionalProperties": false}}})");
const ordered_json kTime = ordered_json::parse(R"({"type": "function", "function": {"name": "get_time",
  "parameters": {"type": "object", "properties": {"hour": {"type": "integer", "minimum": 0, "maximum": 23}},
  "required": ["hour"], "additionalProperties": false}}})");
const ordered_json kPing = ordered_json::parse(R"({"type": "function", "function": {"name": "ping"}})");

ordered_json body_with(ordered_json tool_choice, bool parallel = true) {
  ordered_json body = {{"tools", {kWeather, kTime, kPing}}, {"parallel_tool_calls", parallel}};
  if (!tool_choice.is_null()) body["tool_choice"] = tool_choice;
  return body;
}

std::shared_ptr<const grammar::Grammar> grammar_of(ToolCallFormat format, ordered_json tool_choice, bool parallel = true) {
  const ToolRequest r = parse_tool_request(body_with(tool_choice, parallel), format);
  REQUIRE(!r.gbnf.empty());
  return grammar::parse_gbnf(r.gbnf);
}

std::string bad_param(const ordered_json& body) {
  try {
    parse_tool_request(body, ToolCallFormat::Hermes);
  } catch (const BadRequest& e) {
    return e.param();
  }
  return "(accepted)";
}

}  // namespace

TEST_SUITE("tool calls") {
  TEST_CASE("the format comes from the template's source") {
    CHECK(detect_tool_call_format("{{- '<tool_call>\\n' }}{{ tool_call | tojson }}") == ToolCallFormat::Hermes);
    CHECK(detect_tool_call_format("{{- '<|python_tag|>' + tool_call.name }}") == ToolCallFormat::Llama3);
    CHECK(detect_tool_call_format("<|start_header_id|>ipython<|end_header_id|> {\"name\": function name, "
                                  "\"parameters\": dictionary}") == ToolCallFormat::Llama3);
    CHECK(detect_tool_call_format("{{ '[TOOL_CALLS]' + tool_calls|tojson }}") == ToolCallFormat::Mistral);
    CHECK(detect_tool_call_format("{% for m in messages %}[INST] {{ m.content }} [/INST]{% endfor %}") ==
          ToolCallFormat::Generic);
    CHECK(std::string(tool_call_format_name(ToolCallFormat::Generic)) == "generic");
  }

  TEST_CASE("Hermes parser: content, several calls, a missing closing tag, not-calls") {
    auto p = parse_tool_calls(ToolCallFormat::Hermes,
                              "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"unit\": \"c\", "
                              "\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\":\"ping\",\"arguments\":{}}\n"
                              "</tool_call>");
    REQUIRE(p);
    CHECK(p->content == "Let me look.\n");
    REQUIRE(p->calls.size() == 2);
    CHECK(p->calls[0].name == "get_weather");
    CHECK(p->calls[0].arguments == R"({"unit":"c","city":"Paris"})");  // the model's key order, compact
    CHECK(p->calls[1].name == "ping");
    CHECK(p->calls[1].arguments == "{}");

    p = parse_tool_calls(ToolCallFormat::Generic, "<tool_call>{\"name\": \"ping\", \"arguments\": \"{\\\"a\\\": 1}\"}");
    REQUIRE(p);
    CHECK(p->content.empty());
    CHECK(p->calls[0].arguments == R"({"a":1})");  // arguments given as a string of JSON
    p = parse_tool_calls(ToolCallFormat::Hermes, "  \n<tool_call>{\"name\": \"ping\"}</tool_call>");
    REQUIRE(p);
    CHECK(p->content.empty());  // whitespace only: no content
    CHECK(p->calls[0].arguments == "{}");

    CHECK(!parse_tool_calls(ToolCallFormat::Hermes, "Just text."));
    CHECK(!parse_tool_calls(ToolCallFormat::Hermes, "<tool_call>{\"name\": \"ping\", \"arguments\": {"));   // cut off
    CHECK(!parse_tool_calls(ToolCallFormat::Hermes, "<tool_call>{\"arguments\": {}}</tool_call>"));         // no name
    CHECK(!parse_tool_calls(ToolCallFormat::Hermes, "<tool_call>{\"name\": \"a\", \"arguments\": [1]}</tool_call>"));
    CHECK(!parse_tool_calls(ToolCallFormat::Hermes, "<tool_call>{\"name\": \"a\"}</tool_call> and more"));  // text after
  }

  TEST_CASE("Llama 3 parser") {
    auto p = parse_tool_calls(ToolCallFormat::Llama3, R"({"name": "get_time", "parameters": {"hour": 5}})");
    REQUIRE(p);
    CHECK(p->content.empty());
    REQUIRE(p->calls.size() == 1);
    CHECK(p->calls[0].name == "get_time");
    CHECK(p->calls[0].arguments == R"({"hour":5})");
    p = parse_tool_calls(ToolCallFormat::Llama3, R"(Sure<|python_tag|>{"name": "a", "parameters": {}}; {"name": "b", "arguments": {"x": [1, "}"]}})");
    REQUIRE(p);
    CHECK(p->content == "Sure");
    REQUIRE(p->calls.size() == 2);
    CHECK(p->calls[1].name == "b");
    CHECK(p->calls[1].arguments == R"({"x":[1,"}"]})");
    CHECK(!parse_tool_calls(ToolCallFormat::Llama3, "The answer is {\"name\": \"a\"}"));
    CHECK(!parse_tool_calls(ToolCallFormat::Llama3, R"({"name": "a", "parameters": {}} trailing)"));
  }

  TEST_CASE("Mistral parser") {
    auto p = parse_tool_calls(ToolCallFormat::Mistral,
                              R"([TOOL_CALLS] [{"name": "get_time", "arguments": {"hour": 1}}, {"name": "ping", "arguments": {}}])");
    REQUIRE(p);
    CHECK(p->content.empty());
    REQUIRE(p->calls.size() == 2);
    CHECK(p->calls[0].arguments == R"({"hour":1})");
    CHECK(p->calls[1].name == "ping");
    p = parse_tool_calls(ToolCallFormat::Mistral, R"(Calling.[TOOL_CALLS][{"name": "ping", "arguments": {}}])");
    REQUIRE(p);
    CHECK(p->content == "Calling.");
    // The control token decodes to no text: a bare list is a call too.
    CHECK(parse_tool_calls(ToolCallFormat::Mistral, R"([{"name": "ping", "arguments": {}}])"));
    CHECK(!parse_tool_calls(ToolCallFormat::Mistral, R"([TOOL_CALLS][{"name": "ping", "arguments": {}})"));
    CHECK(!parse_tool_calls(ToolCallFormat::Mistral, "[TOOL_CALLS][]"));
    CHECK(!parse_tool_calls(ToolCallFormat::Mistral, "[1, 2]"));
  }

  TEST_CASE("streaming holds back from where a call may start") {
    CHECK(tool_call_start(ToolCallFormat::Hermes, "Hello") == 5);
    CHECK(tool_call_start(ToolCallFormat::Hermes, "Hello <tool") == 6);
    CHECK(tool_call_start(ToolCallFormat::Hermes, "Hello <") == 6);
    CHECK(tool_call_start(ToolCallFormat::Hermes, "Hello <b>") == 9);
    CHECK(tool_call_start(ToolCallFormat::Hermes, "Hi <tool_call>\n{\"na") == 3);
    CHECK(tool_call_start(ToolCallFormat::Hermes, " \n<tool_call>") == 0);
    CHECK(tool_call_start(ToolCallFormat::Hermes, "  ") == 0);
    CHECK(tool_call_start(ToolCallFormat::Llama3, "{\"name\"") == 0);
    CHECK(tool_call_start(ToolCallFormat::Llama3, "The") == 3);
    CHECK(tool_call_start(ToolCallFormat::Llama3, "The <|python") == 4);
    CHECK(tool_call_start(ToolCallFormat::Mistral, " [{") == 0);
    CHECK(tool_call_start(ToolCallFormat::Mistral, "Ok [TOOL_CALLS]") == 3);
  }

  TEST_CASE("rule names get the prefix, literals, classes, counts and comments do not") {
    const std::string g = "root ::= a-b \"x y\" [a-z\\]] # c d\nab-1 ::= \"\\\"q\" x{2,3}\n";
    CHECK(prefix_gbnf_rules(g, "t0-") == "t0-root ::= t0-a-b \"x y\" [a-z\\]] # c d\nt0-ab-1 ::= \"\\\"q\" t0-x{2,3}\n");
  }

  TEST_CASE("grammar of a named tool: that tool's calls with fitting arguments, nothing else") {
    for (ToolCallFormat format : {ToolCallFormat::Hermes, ToolCallFormat::Generic}) {
      const auto g = grammar_of(format, {{"type", "function"}, {"function", {{"name", "get_weather"}}}});
      const std::string call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\",\"unit\":\"c\"}}\n</tool_call>";
      CHECK(accepts(g, call));
      CHECK(!accepts(g, call + "\n" + call));  // a named tool is called once
      CHECK(!accepts(g, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"hour\":1}}\n</tool_call>"));
      CHECK(!accepts(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\",\"unit\":\"k\"}}\n</tool_call>"));
      CHECK(!accepts(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}\n</tool_call>"));
      CHECK(!accepts(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris-Paris-Paris\",\"unit\":\"c\"}}\n</tool_call>"));
      CHECK(!accepts(g, "Sure. " + call));
      auto parsed = parse_tool_calls(format, call);
      REQUIRE(parsed);
      CHECK(parsed->calls[0].arguments == R"({"city":"Paris","unit":"c"})");
    }
  }

  TEST_CASE("grammar of required: any tool, one or more with parallel_tool_calls, one without") {
    const std::string weather = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Oslo\",\"unit\":\"f\"}}\n</tool_call>";
    const std::string time = "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"hour\":23}}\n</tool_call>";
    const std::string ping = "<tool_call>\n{\"name\": \"ping\", \"arguments\": {\"any\":[1,{\"x\":null}]}}\n</tool_call>";
    const auto g = grammar_of(ToolCallFormat::Hermes, "required");
    CHECK(accepts(g, weather));
    CHECK(accepts(g, time));
    CHECK(accepts(g, ping));  // no parameters: any JSON object
    CHECK(accepts(g, weather + "\n" + time + "\n" + ping));
    std::string eight = time;
    for (int i = 1; i < kMaxParallelToolCalls; ++i) eight += "\n" + ping;
    CHECK(accepts(g, eight));
    CHECK(!accepts(g, eight + "\n" + ping));  // past the most calls of one answer
    CHECK(!accepts(g, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"hour\":24}}\n</tool_call>"));
    CHECK(!accepts(g, "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>"));
    CHECK(!accepts(g, ""));
    const auto single = grammar_of(ToolCallFormat::Hermes, "required", false);
    CHECK(accepts(single, time));
    CHECK(!accepts(single, weather + "\n" + time));
  }

  TEST_CASE("grammars of Llama 3 and Mistral") {
    const auto llama = grammar_of(ToolCallFormat::Llama3, "required");
    const std::string a = R"({"name": "get_time", "parameters": {"hour":7}})";
    const std::string b = R"({"name": "get_weather", "parameters": {"city":"Rome","unit":"c"}})";
    CHECK(accepts(llama, a));
    CHECK(accepts(llama, a + "; " + b));
    CHECK(!accepts(llama, R"({"name": "get_time", "arguments": {"hour":7}})"));
    auto p = parse_tool_calls(ToolCallFormat::Llama3, a + "; " + b);
    REQUIRE(p);
    CHECK(p->calls.size() == 2);

    const auto mistral = grammar_of(ToolCallFormat::Mistral, "required");
    const std::string m = R"([TOOL_CALLS][{"name": "get_time", "arguments": {"hour":0}}, {"name": "ping", "arguments": {}}])";
    CHECK(accepts(mistral, m));
    CHECK(accepts(mistral, R"([TOOL_CALLS][{"name": "get_time", "arguments": {"hour":0}}])"));
    CHECK(!accepts(mistral, "[TOOL_CALLS][]"));
    p = parse_tool_calls(ToolCallFormat::Mistral, m);
    REQUIRE(p);
    CHECK(p->calls.size() == 2);
    const auto mistral_one = grammar_of(ToolCallFormat::Mistral, {{"type", "function"}, {"function", {{"name", "ping"}}}});
    CHECK(accepts(mistral_one, R"([TOOL_CALLS][{"name": "ping", "arguments": {}}])"));
    CHECK(!accepts(mistral_one, m));
  }

  TEST_CASE("request fields: tool_choice modes and the 400s naming the field") {
    CHECK(parse_tool_request(ordered_json::object(), ToolCallFormat::Hermes).mode == ToolChoiceMode::None);
    CHECK(parse_tool_request(body_with(nullptr), ToolCallFormat::Hermes).mode == ToolChoiceMode::Auto);
    const ToolRequest none = parse_tool_request(body_with("none"), ToolCallFormat::Hermes);
    CHECK(none.mode == ToolChoiceMode::None);
    CHECK(none.gbnf.empty());
    const ToolRequest autos = parse_tool_request(body_with("auto"), ToolCallFormat::Hermes);
    CHECK(autos.mode == ToolChoiceMode::Auto);
    CHECK(autos.gbnf.empty());
    CHECK(autos.tools.size() == 3);
    CHECK(parse_tool_request({{"tool_choice", "auto"}}, ToolCallFormat::Hermes).mode == ToolChoiceMode::None);

    CHECK(bad_param(body_with("sometimes")) == "tool_choice");
    CHECK(bad_param(body_with({{"type", "function"}, {"function", {{"name", "nope"}}}})) == "tool_choice");
    CHECK(bad_param(body_with({{"type", "function"}})) == "tool_choice");
    CHECK(bad_param({{"tool_choice", "required"}}) == "tool_choice");  // no tools
    CHECK(bad_param({{"tools", {kPing}}, {"parallel_tool_calls", 1}}) == "parallel_tool_calls");
    CHECK(bad_param({{"tools", kPing}}) == "tools");
    CHECK(bad_param({{"tools", {kPing, kPing}}}) == "tools");  // a name twice
    CHECK(bad_param({{"tools", {{{"type", "retrieval"}}}}}) == "tools");
    CHECK(bad_param({{"tools", {{{"type", "function"}, {"function", {{"name", "a b"}}}}}}}) == "tools");
    CHECK(bad_param({{"tools", {{{"type", "function"}, {"function", {{"name", ""}}}}}}}) == "tools");
    CHECK(bad_param({{"tools", {{{"type", "function"}, {"function", {{"description", "x"}}}}}}}) == "tools");
    CHECK(bad_param({{"tools", {{{"type", "function"}, {"function", {{"name", "a"}, {"parameters", "x"}}}}}}}) == "tools");
    // A schema the compiler refuses: a 400 naming tools when a call is forced, accepted with auto.
    const ordered_json odd = {{"type", "function"},
                              {"function", {{"name", "odd"}, {"parameters", {{"type", "strange"}}}}}};
    CHECK(bad_param({{"tools", {odd}}, {"tool_choice", "required"}}) == "tools");
    CHECK(bad_param({{"tools", {odd}}, {"tool_choice", "auto"}}) == "(accepted)");
  }

  TEST_CASE("call ids") {
    const std::string a = make_tool_call_id(), b = make_tool_call_id();
    CHECK(a.rfind("call_", 0) == 0);
    CHECK(a.size() == 29);
    CHECK(a != b);
  }
}

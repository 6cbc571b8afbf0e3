// Structured output over real HTTP on stories260K (a model that knows nothing of JSON): sampled at temperature
// 1 over many seeds, every output that stops fits its schema, regex (checked with std::regex), choice or
// grammar; n > 1, streaming, chat and logprobs keep the constraint; a constrained request batched with others
// gives the tokens it gives alone; bad constraints are 400s naming the field.
#include <doctest/doctest.h>

#include <future>
#include <regex>
#include <set>

#include "serve_fixture.h"

using namespace inflight;
using namespace inflight::test;

namespace {

using ordered_json = nlohmann::ordered_json;

// Bounded strings and arrays, so that a model rambling inside a string still has to close it. Its properties
// are not in alphabetical order: the output must keep the schema's.
const ordered_json kPersonSchema = ordered_json::parse(R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 12},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "pet": {"enum": ["cat", "dog", "fish"]},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3}
  },
  "required": ["name", "age", "pet", "tags"],
  "additionalProperties": false
})");

size_t utf8_length(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool whitespace_outside_strings(const std::string& text) {
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
      return true;
    }
  }
  return false;
}

// kPersonSchema checked by hand: the keys in `key_order`, their types and bounds.
void check_person(const std::string& text,
                  const std::vector<std::string>& key_order = {"name", "age", "pet", "tags"}) {
  CAPTURE(text);
  const json j = json::parse(text, nullptr, false);
  REQUIRE(j.is_object());
  CHECK(j.size() == 4);
  REQUIRE(j.contains("name"));
  REQUIRE(j["name"].is_string());
  const size_t name_length = utf8_length(j["name"].get<std::string>());
  CHECK((name_length >= 1 && name_length <= 12));
  REQUIRE(j.contains("age"));
  REQUIRE(j["age"].is_number_integer());
  CHECK((j["age"].get<int64_t>() >= 0 && j["age"].get<int64_t>() <= 120));
  REQUIRE(j.contains("pet"));
  CHECK((j["pet"] == "cat" || j["pet"] == "dog" || j["pet"] == "fish"));
  REQUIRE(j.contains("tags"));
  REQUIRE(j["tags"].is_array());
  CHECK(j["tags"].size() <= 3);
  for (const json& t : j["tags"]) CHECK((t.is_string() && utf8_length(t.get<std::string>()) <= 6));
  // Compact and in the schema's key order.
  CHECK(!whitespace_outside_strings(text));
  std::vector<std::string> keys;
  const ordered_json ordered = ordered_json::parse(text);
  for (const auto& [key, value] : ordered.items()) keys.push_back(key);
  CHECK(keys == key_order);
}

ordered_json schema_request(int seed) {
  return {{"prompt", "Once upon a time"},
          {"max_tokens", 120},
          {"temperature", 1.0},
          {"seed", seed},
          {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "person"}, {"schema", kPersonSchema}}}}}};
}

// post_json with the body's key order kept (a schema's properties).
JsonResult post(uint16_t port, const std::string& target, const ordered_json& body) {
  JsonResult r;
  r.http = http_request(port, "POST", target, body.dump());
  r.status = r.http.status;
  r.body = json::parse(r.http.body, nullptr, false);
  return r;
}

}  // namespace

TEST_SUITE("serve structured output") {
  TEST_CASE("response_format json_schema: sampled outputs fit the schema, and most stop") {
    const uint16_t port = stories_server().port();
    int num_stopped = 0;
    constexpr int kSeeds = 24;
    for (int seed = 0; seed < kSeeds; ++seed) {
      CAPTURE(seed);
      const JsonResult r = post(port, "/v1/completions", schema_request(seed));
      REQUIRE(r.status == 200);
      const json& choice = r.body["choices"][0];
      if (choice["finish_reason"] != "stop") continue;
      ++num_stopped;
      check_person(choice["text"].get<std::string>());
    }
    CHECK(num_stopped >= kSeeds * 3 / 4);
  }

  TEST_CASE("the same schema through vLLM's and llama.cpp's fields, and in chat") {
    const uint16_t port = stories_server().port();
    for (const char* field : {"structured_outputs", "guided_json", "json_schema"}) {
      CAPTURE(field);
      ordered_json body = schema_request(7);
      body.erase("response_format");
      if (std::string(field) == "structured_outputs") body[field] = {{"json", kPersonSchema}};
      else body[field] = kPersonSchema;
      const JsonResult r = post(port, "/v1/completions", body);
      REQUIRE(r.status == 200);
      // One compiled grammar whatever the field: the same tokens as response_format gives.
      const JsonResult same = post(port, "/v1/completions", schema_request(7));
      CHECK(r.body["choices"][0]["text"] == same.body["choices"][0]["text"]);
    }
    // A schema written as a JSON string (vLLM accepts both).
    ordered_json body = schema_request(7);
    body.erase("response_format");
    body["guided_json"] = kPersonSchema.dump();
    CHECK(post(port, "/v1/completions", body).body["choices"][0]["text"] ==
          post(port, "/v1/completions", schema_request(7)).body["choices"][0]["text"]);

    for (int seed = 0; seed < 6; ++seed) {
      ordered_json chat = schema_request(seed);
      chat.erase("prompt");
      chat["messages"] = ordered_json::array({{{"role", "user"}, {"content", "Tell me about a person."}}});
      const JsonResult r = post(port, "/v1/chat/completions", chat);
      REQUIRE(r.status == 200);
      if (r.body["choices"][0]["finish_reason"] == "stop") check_person(r.body["choices"][0]["message"]["content"]);
    }
  }

  TEST_CASE("regex, choice and GBNF: every output is in the language") {
    const uint16_t port = stories_server().port();
    const std::string pattern = R"((a|the) (big|small) (cat|dog)( (ran|sat))?\.)";
    const std::regex oracle(pattern, std::regex::ECMAScript);
    const std::set<std::string> choices{"happy", "sad", "a little angry"};
    for (int seed = 0; seed < 12; ++seed) {
      CAPTURE(seed);
      json body = {{"prompt", "The cat"}, {"max_tokens", 40}, {"temperature", 1.0}, {"seed", seed}};
      body["structured_outputs"] = {{"regex", pattern}};
      JsonResult r = post_json(port, "/v1/completions", body);
      REQUIRE(r.status == 200);
      CHECK(r.body["choices"][0]["finish_reason"] == "stop");
      CHECK(std::regex_match(r.body["choices"][0]["text"].get<std::string>(), oracle));

      body.erase("structured_outputs");
      body["guided_choice"] = choices;
      r = post_json(port, "/v1/completions", body);
      REQUIRE(r.status == 200);
      CHECK(choices.count(r.body["choices"][0]["text"].get<std::string>()) == 1);

      body.erase("guided_choice");
      body["grammar"] = R"(root ::= "The answer is " num "."
num ::= [1-9] [0-9]? | "zero")";
      r = post_json(port, "/v1/completions", body);
      REQUIRE(r.status == 200);
      CHECK(std::regex_match(r.body["choices"][0]["text"].get<std::string>(),
                             std::regex(R"(The answer is ([1-9][0-9]?|zero)\.)")));
    }
  }

  TEST_CASE("n > 1 and streaming: every choice fits; the streamed text is the whole answer") {
    const uint16_t port = stories_server().port();
    json body = schema_request(11);  // the properties in alphabetical order (post_stream sends a json)
    body["n"] = 4;
    const JsonResult r = post_json(port, "/v1/completions", body);
    REQUIRE(r.status == 200);
    REQUIRE(r.body["choices"].size() == 4);
    for (const json& c : r.body["choices"])
      if (c["finish_reason"] == "stop") check_person(c["text"].get<std::string>(), {"age", "name", "pet", "tags"});
    body["stream"] = true;
    const StreamResult s = post_stream(port, "/v1/completions", body);
    REQUIRE(s.done);
    for (int i = 0; i < 4; ++i) CHECK(stream_text(s, i) == r.body["choices"][size_t(i)]["text"]);
  }

  TEST_CASE("a constrained request batched with others gives the tokens it gives alone") {
    const uint16_t port = stories_server().port();
    const std::string alone = post(port, "/v1/completions", schema_request(5)).body["choices"][0]["text"];
    std::vector<std::future<std::string>> others;
    for (int i = 0; i < 6; ++i)
      others.push_back(std::async(std::launch::async, [port, i] {
        const ordered_json b = i % 2 ? schema_request(100 + i)
                                     : ordered_json{{"prompt", "Lily and Tom went to the park"}, {"max_tokens", 60}, {"seed", i}};
        return post(port, "/v1/completions", b).body["choices"][0]["text"].get<std::string>();
      }));
    const std::string batched = post(port, "/v1/completions", schema_request(5)).body["choices"][0]["text"];
    for (auto& f : others) f.get();
    CHECK(batched == alone);
  }

  TEST_CASE("logprobs come after the mask: every alternative is a token the grammar allows") {
    const uint16_t port = stories_server().port();
    const json body = {{"prompt", "The cat"}, {"max_tokens", 8}, {"temperature", 0}, {"logprobs", 5},
                       {"guided_choice", {"Yes", "No"}}};
    const JsonResult r = post_json(port, "/v1/completions", body);
    REQUIRE(r.status == 200);
    const json& choice = r.body["choices"][0];
    const std::string text = choice["text"];
    CHECK((text == "Yes" || text == "No"));
    // The first token: each alternative starts one of the choices.
    const json& first = choice["logprobs"]["top_logprobs"][0];
    REQUIRE(!first.empty());
    for (const auto& [alternative, logprob] : first.items()) {
      CAPTURE(alternative);
      CHECK((std::string("Yes").rfind(alternative, 0) == 0 || std::string("No").rfind(alternative, 0) == 0));
      CHECK(logprob.get<double>() <= 0.0);
    }
  }

  TEST_CASE("/metrics counts constrained requests by kind and times their grammars") {
    const uint16_t port = stories_server().port();
    auto scrape = [&] { return http_request(port, "GET", "/metrics", "").body; };
    const std::string before = scrape();
    const double choices = std::max(0.0, metric_value(before, "inflight_constrained_requests_total{kind=\"choice\"}"));
    const double tokens = metric_value(before, "inflight_grammar_token_seconds_count");
    const double compiles = metric_value(before, "inflight_grammar_compile_seconds_count");
    const JsonResult r = post_json(port, "/v1/completions", {{"prompt", "The cat"}, {"max_tokens", 8},
                                                             {"guided_choice", {"a little angry", "sad"}}});
    REQUIRE(r.status == 200);
    const std::string after = scrape();
    CHECK(metric_value(after, "inflight_constrained_requests_total{kind=\"choice\"}") == choices + 1);
    CHECK(metric_value(after, "inflight_grammar_compile_seconds_count") == compiles + 1);
    // One observation per generated token (the end token included).
    CHECK(metric_value(after, "inflight_grammar_token_seconds_count") >=
          tokens + r.body["usage"]["completion_tokens"].get<double>());
  }

  TEST_CASE("bad constraints are 400s naming the field and the problem") {
    const uint16_t port = stories_server().port();
    struct Bad {
      json fields;
      std::string param;
      std::string message_part;
    };
    const std::vector<Bad> cases = {
        {{{"json_schema", {{"type", "object"}, {"properties", {{"a", {{"propertyNames", {{"type", "string"}}}}}}}}}},
         "json_schema", "\"propertyNames\" at /properties/a"},
        {{{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}}}}}}, "response_format",
         "schema is required"},
        {{{"response_format", {{"type", "yaml"}}}}, "response_format", "yaml"},
        {{{"structured_outputs", {{"regex", "(a)\\1"}}}}, "structured_outputs.regex", "backreference"},
        {{{"grammar", "root ::= \"a"}}, "grammar", "1:"},
        {{{"guided_choice", json::array()}}, "guided_choice", "non-empty"},
        {{{"guided_regex", "a"}, {"guided_choice", {"a"}}}, "guided_choice", "one structured-output constraint"},
        {{{"guided_regex", "a"}, {"use_beam_search", true}, {"n", 2}}, "use_beam_search", "beam"},
    };
    for (const Bad& b : cases) {
      json body = {{"prompt", "The cat"}, {"max_tokens", 8}};
      body.update(b.fields);
      CAPTURE(body.dump());
      const JsonResult r = post_json(port, "/v1/completions", body);
      CHECK(r.status == 400);
      check_error_envelope(r.body);
      CHECK(r.body["error"]["param"] == b.param);
      CHECK_MESSAGE(r.body["error"]["message"].get<std::string>().find(b.message_part) != std::string::npos,
                    r.body["error"]["message"]);
    }
    // response_format text is no constraint.
    CHECK(post_json(port, "/v1/completions", {{"prompt", "The cat"}, {"max_tokens", 4}, {"response_format", {{"type", "text"}}}}).status == 200);
  }
}

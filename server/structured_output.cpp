#include "server/structured_output.h"

#include <chrono>
#include <string_view>
#include <vector>

#include "engine/grammar/choice.h"
#include "engine/grammar/json_schema.h"
#include "engine/grammar/regex.h"
#include "server/api_error.h"

namespace inflight::server {

namespace grammar = engine::grammar;
using nlohmann::ordered_json;

namespace {

// One constraint as the request wrote it: its field (for errors), its kind, and its value.
struct Constraint {
  std::string field;
  std::string kind;  // "json_schema", "json_object", "regex", "choice", "grammar"
  const ordered_json* value = nullptr;
};

// A schema given as an object, or as a string holding one (vLLM accepts both).
std::string schema_gbnf(const ordered_json& value, const std::string& field) {
  if (value.is_string()) return grammar::json_schema_to_gbnf(std::string_view(value.get_ref<const std::string&>()));
  if (!value.is_object() && !value.is_boolean())
    throw BadRequest(field, field + " must be a JSON Schema (an object, or a string holding one)");
  return grammar::json_schema_to_gbnf(value);
}

std::string text_field(const ordered_json& value, const std::string& field, const char* what) {
  if (!value.is_string()) throw BadRequest(field, field + " must be a string holding " + what);
  return value.get<std::string>();
}

std::string gbnf_of(const Constraint& c) {
  const ordered_json& v = *c.value;
  if (c.kind == "json_schema") return schema_gbnf(v, c.field);
  if (c.kind == "json_object") return grammar::json_object_gbnf();
  if (c.kind == "regex") return grammar::regex_to_gbnf(text_field(v, c.field, "a regular expression"));
  if (c.kind == "grammar") return text_field(v, c.field, "a GBNF grammar");
  // choice
  if (!v.is_array() || v.empty()) throw BadRequest(c.field, c.field + " must be a non-empty list of strings");
  std::vector<std::string> choices;
  for (const ordered_json& s : v) {
    if (!s.is_string()) throw BadRequest(c.field, c.field + " must be a non-empty list of strings");
    choices.push_back(s.get<std::string>());
  }
  return grammar::choice_to_gbnf(choices);
}

// OpenAI's response_format; nothing for {"type": "text"}.
void read_response_format(const ordered_json& rf, std::vector<Constraint>* out) {
  const std::string field = "response_format";
  if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
    throw BadRequest(field, "response_format must be an object with a type: text, json_object or json_schema");
  const std::string type = rf["type"].get<std::string>();
  if (type == "text") return;
  if (type == "json_object") {
    out->push_back({field, "json_object", &rf});
    return;
  }
  if (type != "json_schema")
    throw BadRequest(field, "response_format.type must be text, json_object or json_schema, not \"" + type + "\"");
  const auto js = rf.find("json_schema");
  if (js == rf.end() || !js->is_object())
    throw BadRequest(field, "response_format.json_schema must be an object with a schema");
  const auto schema = js->find("schema");
  if (schema == js->end()) throw BadRequest(field, "response_format.json_schema.schema is required");
  out->push_back({"response_format.json_schema.schema", "json_schema", &*schema});
}

}  // namespace

StructuredOutput parse_structured_output(const ordered_json& body) {
  std::vector<Constraint> found;
  auto present = [&](const char* name) -> const ordered_json* {
    const auto it = body.find(name);
    return it == body.end() || it->is_null() ? nullptr : &*it;
  };
  if (const ordered_json* rf = present("response_format")) read_response_format(*rf, &found);
  if (const ordered_json* so = present("structured_outputs")) {
    if (!so->is_object()) throw BadRequest("structured_outputs", "structured_outputs must be an object");
    static const std::pair<const char*, const char*> kKeys[] = {
        {"json", "json_schema"}, {"json_object", "json_object"}, {"regex", "regex"}, {"choice", "choice"},
        {"grammar", "grammar"}};
    for (const auto& [key, kind] : kKeys) {
      const auto it = so->find(key);
      if (it == so->end() || it->is_null()) continue;
      if (std::string_view(key) == "json_object" && *it != true)
        throw BadRequest("structured_outputs.json_object", "structured_outputs.json_object must be true");
      found.push_back({std::string("structured_outputs.") + key, kind, &*it});
    }
  }
  static const std::pair<const char*, const char*> kFields[] = {
      {"guided_json", "json_schema"}, {"guided_regex", "regex"}, {"guided_choice", "choice"},
      {"guided_grammar", "grammar"},  {"json_schema", "json_schema"}, {"grammar", "grammar"}};
  for (const auto& [name, kind] : kFields)
    if (const ordered_json* v = present(name)) found.push_back({name, kind, v});

  if (found.empty()) return {};
  if (found.size() > 1)
    throw BadRequest(found[1].field, "one structured-output constraint per request: both " + found[0].field +
                                         " and " + found[1].field + " are set");
  const Constraint& c = found[0];
  try {
    const auto start = std::chrono::steady_clock::now();
    StructuredOutput out{grammar::compile_cached(gbnf_of(c)), c.kind};
    out.compile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return out;
  } catch (const grammar::GrammarError& e) {
    throw BadRequest(c.field, c.field + ": " + e.what());
  }
}

}  // namespace inflight::server

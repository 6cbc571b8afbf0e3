#include "server/tool_calls.h"

#include <random>
#include <set>

#include "engine/grammar/choice.h"
#include "engine/grammar/json_schema.h"
#include "server/api_error.h"

namespace inflight::server {

using nlohmann::json;
using nlohmann::ordered_json;
namespace grammar = engine::grammar;

namespace {

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralTag = "[TOOL_CALLS]";
constexpr size_t kMaxToolNameLength = 64;

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

size_t skip_space(std::string_view text, size_t p) {
  while (p < text.size() && is_space(text[p])) ++p;
  return p;
}

bool all_space(std::string_view text) { return skip_space(text, 0) == text.size(); }

// One past the end of the JSON object or array starting at text[p] ('{' or '['), by bracket depth outside
// strings; npos when it does not close.
size_t json_extent(std::string_view text, size_t p) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = p; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

std::optional<ToolCall> call_at(std::string_view text, size_t* p) {
  *p = skip_space(text, *p);
  if (*p >= text.size() || text[*p] != '{') return std::nullopt;
  const size_t start = *p;
  const size_t end = json_extent(text, start);
  if (end == std::string_view::npos) return std::nullopt;
  // ordered_json keeps the arguments' key order as generated.
  const ordered_json v = ordered_json::parse(text.substr(start, end - start), nullptr, false);
  if (v.is_discarded() || !v.is_object()) return std::nullopt;
  *p = end;
  auto name = v.find("name");
  if (name == v.end() || !name->is_string() || name->get<std::string>().empty()) return std::nullopt;
  auto args = v.find("arguments");
  if (args == v.end()) args = v.find("parameters");
  ordered_json arguments = ordered_json::object();
  if (args != v.end()) {
    arguments = *args;
    if (arguments.is_string()) arguments = ordered_json::parse(args->get<std::string>(), nullptr, false);
    if (arguments.is_discarded() || !arguments.is_object()) return std::nullopt;
  }
  return ToolCall{name->get<std::string>(), arguments.dump()};
}

ParsedToolCalls with_content(std::string_view before) {
  ParsedToolCalls out;
  if (!all_space(before)) out.content = std::string(before);
  return out;
}

std::optional<ParsedToolCalls> parse_hermes(std::string_view text) {
  size_t p = text.find(kHermesOpen);
  if (p == std::string_view::npos) return std::nullopt;
  ParsedToolCalls out = with_content(text.substr(0, p));
  while (true) {
    p += kHermesOpen.size();
    std::optional<ToolCall> call = call_at(text, &p);
    if (!call) return std::nullopt;
    out.calls.push_back(std::move(*call));
    p = skip_space(text, p);
    if (p == text.size()) break;  // the closing tag may be missing at the end (a stop string ate it)
    if (text.substr(p, kHermesClose.size()) != kHermesClose) return std::nullopt;
    p = skip_space(text, p + kHermesClose.size());
    if (p == text.size()) break;
    if (text.substr(p, kHermesOpen.size()) != kHermesOpen) return std::nullopt;
  }
  return out;
}

std::optional<ParsedToolCalls> parse_llama3(std::string_view text) {
  size_t p = text.find(kPythonTag);
  ParsedToolCalls out;
  if (p != std::string_view::npos) {
    out = with_content(text.substr(0, p));
    p += kPythonTag.size();
  } else {
    p = 0;
  }
  while (true) {
    std::optional<ToolCall> call = call_at(text, &p);
    if (!call) return std::nullopt;
    out.calls.push_back(std::move(*call));
    p = skip_space(text, p);
    if (p == text.size()) break;
    if (text[p] != ';') return std::nullopt;
    ++p;
  }
  return out;
}

std::optional<ParsedToolCalls> parse_mistral(std::string_view text) {
  size_t p = text.find(kMistralTag);
  ParsedToolCalls out;
  if (p != std::string_view::npos) {
    out = with_content(text.substr(0, p));
    p += kMistralTag.size();
  } else {
    p = 0;
  }
  p = skip_space(text, p);
  if (p >= text.size() || text[p] != '[') return std::nullopt;
  ++p;
  while (true) {
    std::optional<ToolCall> call = call_at(text, &p);
    if (!call) return std::nullopt;
    out.calls.push_back(std::move(*call));
    p = skip_space(text, p);
    if (p < text.size() && text[p] == ',') {
      ++p;
      continue;
    }
    if (p < text.size() && text[p] == ']') break;
    return std::nullopt;
  }
  if (skip_space(text, p + 1) != text.size()) return std::nullopt;
  return out;
}

// Where `tag` starts in `text`, or where a prefix of it ends `text`; npos when neither.
size_t tag_start(std::string_view text, std::string_view tag) {
  if (size_t p = text.find(tag); p != std::string_view::npos) return p;
  for (size_t k = std::min(tag.size() - 1, text.size()); k > 0; --k)
    if (text.substr(text.size() - k) == tag.substr(0, k)) return text.size() - k;
  return std::string_view::npos;
}

void check_tool_name(const std::string& name, const std::string& field) {
  if (name.empty() || name.size() > kMaxToolNameLength)
    throw BadRequest("tools", field + " must be 1 to 64 characters long");
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.'))
      throw BadRequest("tools", field + " may hold only letters, digits, '_', '-' and '.', got \"" + name + "\"");
}

Tool parse_tool(const ordered_json& t, const std::string& field) {
  if (!t.is_object()) throw BadRequest("tools", field + " must be an object");
  auto type = t.find("type");
  if (type == t.end() || !type->is_string() || *type != "function")
    throw BadRequest("tools", field + ".type must be \"function\"");
  auto fn = t.find("function");
  if (fn == t.end() || !fn->is_object()) throw BadRequest("tools", field + ".function must be an object");
  auto name = fn->find("name");
  if (name == fn->end() || !name->is_string()) throw BadRequest("tools", field + ".function.name must be a string");
  Tool tool;
  tool.name = name->get<std::string>();
  check_tool_name(tool.name, field + ".function.name");
  if (auto d = fn->find("description"); d != fn->end() && !d->is_null() && !d->is_string())
    throw BadRequest("tools", field + ".function.description must be a string");
  if (auto s = fn->find("strict"); s != fn->end() && !s->is_null() && !s->is_boolean())
    throw BadRequest("tools", field + ".function.strict must be a boolean");
  if (auto params = fn->find("parameters"); params != fn->end() && !params->is_null()) {
    if (!params->is_object()) throw BadRequest("tools", field + ".function.parameters must be a JSON Schema object");
    tool.parameters = *params;
  }
  return tool;
}

}  // namespace

ToolCallFormat detect_tool_call_format(std::string_view source) {
  if (source.find(kMistralTag) != std::string_view::npos) return ToolCallFormat::Mistral;
  if (source.find(kHermesOpen) != std::string_view::npos) return ToolCallFormat::Hermes;
  if (source.find(kPythonTag) != std::string_view::npos ||
      (source.find("\"parameters\"") != std::string_view::npos && source.find("ipython") != std::string_view::npos))
    return ToolCallFormat::Llama3;
  return ToolCallFormat::Generic;
}

const char* tool_call_format_name(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::Hermes: return "hermes";
    case ToolCallFormat::Llama3: return "llama3";
    case ToolCallFormat::Mistral: return "mistral";
    case ToolCallFormat::Generic: break;
  }
  return "generic";
}

std::string prefix_gbnf_rules(std::string_view gbnf, std::string_view prefix) {
  std::string out;
  out.reserve(gbnf.size() + gbnf.size() / 4);
  auto is_name_char = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
  };
  size_t i = 0;
  // Copies a quoted run (a literal "..." or a class [...]) up to its unescaped closing character.
  auto copy_quoted = [&](char close) {
    out += gbnf[i++];
    while (i < gbnf.size()) {
      const char c = gbnf[i++];
      out += c;
      if (c == '\\' && i < gbnf.size()) out += gbnf[i++];
      else if (c == close) return;
    }
  };
  while (i < gbnf.size()) {
    const char c = gbnf[i];
    if (c == '"') {
      copy_quoted('"');
    } else if (c == '[') {
      copy_quoted(']');
    } else if (c == '#') {
      while (i < gbnf.size() && gbnf[i] != '\n') out += gbnf[i++];
    } else if (c == '{') {  // a repetition count {m,n}
      while (i < gbnf.size() && gbnf[i] != '}') out += gbnf[i++];
    } else if (is_name_char(c)) {
      out += prefix;
      while (i < gbnf.size() && is_name_char(gbnf[i])) out += gbnf[i++];
    } else {
      out += c;
      ++i;
    }
  }
  return out;
}

std::string tool_calls_gbnf(ToolCallFormat format, std::span<const Tool> tools, bool parallel) {
  const bool llama3 = format == ToolCallFormat::Llama3;
  const std::string args_key = llama3 ? "parameters" : "arguments";
  std::string rules;
  std::vector<std::string> alternatives;
  for (size_t i = 0; i < tools.size(); ++i) {
    const Tool& tool = tools[i];
    const std::string prefix = "tool" + std::to_string(i) + "-";
    std::string args;
    try {
      args = tool.parameters.is_null() ? grammar::json_object_gbnf() : grammar::json_schema_to_gbnf(tool.parameters);
    } catch (const grammar::GrammarError& e) {
      throw grammar::GrammarError("the parameters of tool \"" + tool.name + "\": " + e.what());
    }
    rules += prefix_gbnf_rules(args, prefix) + "\n";
    // `"name": "N", "arguments": ARGS`
    alternatives.push_back(grammar::gbnf_literal(json(tool.name).dump() + ", \"" + args_key + "\": ") + " " + prefix + "root");
  }
  std::string call = grammar::gbnf_literal("{\"name\": ") + " " + grammar::gbnf_alternation(alternatives) + " " +
                     grammar::gbnf_literal("}");
  std::string root;
  const std::string more = "{0," + std::to_string(kMaxParallelToolCalls - 1) + "}";
  switch (format) {
    case ToolCallFormat::Generic:
    case ToolCallFormat::Hermes:
      call = grammar::gbnf_literal(std::string(kHermesOpen) + "\n") + " " + call + " " +
             grammar::gbnf_literal("\n" + std::string(kHermesClose));
      root = parallel ? "call (" + grammar::gbnf_literal("\n") + " call)" + more : "call";
      break;
    case ToolCallFormat::Llama3:
      root = parallel ? "call (" + grammar::gbnf_literal("; ") + " call)" + more : "call";
      break;
    case ToolCallFormat::Mistral:
      root = grammar::gbnf_literal(std::string(kMistralTag) + "[") + " call " +
             (parallel ? "(" + grammar::gbnf_literal(", ") + " call)" + more + " " : "") + grammar::gbnf_literal("]");
      break;
  }
  return "root ::= " + root + "\ncall ::= " + call + "\n" + rules;
}

ToolRequest parse_tool_request(const ordered_json& body, ToolCallFormat format) {
  ToolRequest out;
  if (auto tools = body.find("tools"); tools != body.end() && !tools->is_null()) {
    if (!tools->is_array()) throw BadRequest("tools", "tools must be a list");
    std::set<std::string> names;
    for (size_t i = 0; i < tools->size(); ++i) {
      const std::string field = "tools[" + std::to_string(i) + "]";
      Tool tool = parse_tool((*tools)[i], field);
      if (!names.insert(tool.name).second)
        throw BadRequest("tools", field + ".function.name: the name \"" + tool.name + "\" is given twice");
      out.tools.push_back(std::move(tool));
    }
  }
  if (auto p = body.find("parallel_tool_calls"); p != body.end() && !p->is_null()) {
    if (!p->is_boolean()) throw BadRequest("parallel_tool_calls", "parallel_tool_calls must be a boolean");
    out.parallel = p->get<bool>();
  }
  out.mode = out.tools.empty() ? ToolChoiceMode::None : ToolChoiceMode::Auto;
  auto choice = body.find("tool_choice");
  if (choice == body.end() || choice->is_null()) return out;
  if (choice->is_string()) {
    const std::string c = choice->get<std::string>();
    if (c == "none") out.mode = ToolChoiceMode::None;
    else if (c == "required") out.mode = ToolChoiceMode::Required;
    else if (c != "auto")
      throw BadRequest("tool_choice", "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                                      "\"function\": {\"name\": ...}}, got \"" + c + "\"");
  } else if (choice->is_object()) {
    auto type = choice->find("type");
    auto fn = choice->find("function");
    if (type == choice->end() || *type != "function" || fn == choice->end() || !fn->is_object() ||
        !fn->contains("name") || !(*fn)["name"].is_string())
      throw BadRequest("tool_choice", "tool_choice must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
    out.mode = ToolChoiceMode::Named;
    out.named = (*fn)["name"].get<std::string>();
  } else {
    throw BadRequest("tool_choice", "tool_choice must be a string or an object");
  }
  if ((out.mode == ToolChoiceMode::Required || out.mode == ToolChoiceMode::Named) && out.tools.empty())
    throw BadRequest("tool_choice", "tool_choice asks for a tool call, but the request gives no tools");
  if (out.mode == ToolChoiceMode::Auto && out.tools.empty()) out.mode = ToolChoiceMode::None;

  std::vector<Tool> chosen;
  if (out.mode == ToolChoiceMode::Required) {
    chosen = out.tools;
  } else if (out.mode == ToolChoiceMode::Named) {
    for (const Tool& t : out.tools)
      if (t.name == out.named) chosen.push_back(t);
    if (chosen.empty()) throw BadRequest("tool_choice", "tool_choice names \"" + out.named + "\", which is not in tools");
  } else {
    return out;
  }
  try {
    // A named tool is called once; `required` calls one or more with parallel_tool_calls.
    out.gbnf = tool_calls_gbnf(format, chosen, out.mode == ToolChoiceMode::Required && out.parallel);
  } catch (const grammar::GrammarError& e) {
    throw BadRequest("tools", e.what());
  }
  return out;
}

std::optional<ParsedToolCalls> parse_tool_calls(ToolCallFormat format, std::string_view text) {
  switch (format) {
    case ToolCallFormat::Llama3: return parse_llama3(text);
    case ToolCallFormat::Mistral: return parse_mistral(text);
    case ToolCallFormat::Generic:
    case ToolCallFormat::Hermes: break;
  }
  return parse_hermes(text);
}

size_t tool_call_start(ToolCallFormat format, std::string_view text) {
  if (all_space(text)) return 0;
  size_t start = std::string_view::npos;
  switch (format) {
    case ToolCallFormat::Generic:
    case ToolCallFormat::Hermes: start = tag_start(text, kHermesOpen); break;
    case ToolCallFormat::Llama3:
    case ToolCallFormat::Mistral: {
      start = tag_start(text, format == ToolCallFormat::Llama3 ? kPythonTag : kMistralTag);
      // The bare JSON form: the answer starts with it.
      const size_t p = skip_space(text, 0);
      if (p == text.size() || text[p] == (format == ToolCallFormat::Llama3 ? '{' : '[')) start = 0;
      break;
    }
  }
  if (start == std::string_view::npos) return text.size();
  // Whitespace before a call is no content: held back with it.
  return all_space(text.substr(0, start)) ? 0 : start;
}

std::string make_tool_call_id() {
  static constexpr char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uniform_int_distribution<int> pick(0, int(sizeof kChars) - 2);
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kChars[pick(rng)];
  return id;
}

}  // namespace inflight::server

// Tool calls on /v1/chat/completions: the call format a chat template speaks (picked from its source
// text), the request's `tools` / `tool_choice` / `parallel_tool_calls` checked, the GBNF of "a call to one of
// these tools with arguments fitting its parameters", and the parser from generated text back to calls.
//
// | format | picked when the template mentions | one call | several calls |
// |---|---|---|---|
// | Hermes (Hermes 2/3, Qwen 2.5, Qwen 3) | `<tool_call>` | `<tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>` | blocks joined by "\n" |
// | Llama 3 (3.1-3.3) | `<\|python_tag\|>`, or `"parameters"` with `ipython` | `{"name": N, "parameters": {...}}` (an optional `<\|python_tag\|>` before) | objects joined by "; " |
// | Mistral | `[TOOL_CALLS]` | `[TOOL_CALLS][{"name": N, "arguments": {...}}]` | more objects in the list |
// | generic (any other template) | | the Hermes form | the Hermes form |
//
// The grammar writes exactly the forms above (arguments compact, as json_schema_to_gbnf writes them); the
// parser also takes any whitespace around and inside the JSON, and a missing closing `</tool_call>` at the end.
// Text before the first call is the message's content; text after the last call (other than whitespace) means
// the answer is not a call, and it stays plain text.
#pragma once
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace inflight::server {

enum class ToolCallFormat { Generic, Hermes, Llama3, Mistral };

// The most calls a forced answer may hold with parallel_tool_calls: the grammar is then complete and only the
// end can come, so a model that would go on calling forever stops (the parser takes any number).
inline constexpr int kMaxParallelToolCalls = 8;

// The format a template's Jinja source speaks (the table above; first match in the order Mistral, Hermes, Llama 3).
ToolCallFormat detect_tool_call_format(std::string_view template_source);
const char* tool_call_format_name(ToolCallFormat format);  // "generic", "hermes", "llama3", "mistral"

// One tool of a request: its name and its `parameters` schema (null when absent: any JSON object).
struct Tool {
  std::string name;
  nlohmann::ordered_json parameters;
};

// What tool_choice asks for. None: tools reach the template, nothing is parsed. Auto: the answer is parsed
// for calls, no grammar. Required: one or more calls to any tool (one with parallel_tool_calls false), from the
// first token. Named: a call to `name`.
enum class ToolChoiceMode { None, Auto, Required, Named };

struct ToolRequest {
  std::vector<Tool> tools;      // empty: no tools (tool_choice is then none)
  ToolChoiceMode mode = ToolChoiceMode::None;
  std::string named;            // Named: the tool's name
  bool parallel = true;         // parallel_tool_calls
  std::string gbnf;             // Required / Named: the grammar the answer must match; empty otherwise
};

// Reads `tools` (each {"type": "function", "function": {"name", "description"?, "parameters"?, "strict"?}},
// names 1-64 of [A-Za-z0-9_.-] and unique), `tool_choice` and `parallel_tool_calls` from `body` (the client's
// key order), and writes the grammar of Required / Named in `format`. Throws BadRequest naming the field
// (tools, tool_choice, parallel_tool_calls); a parameters schema the grammar compiler refuses is a 400 naming
// tools.
ToolRequest parse_tool_request(const nlohmann::ordered_json& body, ToolCallFormat format);

// GBNF (root rule `root`) of one call to any of `tools` (or, with `parallel`, 1 to kMaxParallelToolCalls) in
// `format`. Throws
// engine::grammar::GrammarError for a parameters schema the compiler refuses.
std::string tool_calls_gbnf(ToolCallFormat format, std::span<const Tool> tools, bool parallel);

// Every rule name of `gbnf` (definitions and references, not the text inside literals, classes or comments)
// with `prefix` in front: "root ::= x" with "t0-" is "t0-root ::= t0-x". So several grammars join in one.
std::string prefix_gbnf_rules(std::string_view gbnf, std::string_view prefix);

struct ToolCall {
  std::string name;
  std::string arguments;  // the arguments object as compact JSON text
};

struct ParsedToolCalls {
  std::string content;  // the text before the first call, whitespace at its end dropped
  std::vector<ToolCall> calls;  // at least one
};

// The calls in `text`, or nullopt when it is not (content and) calls in `format`.
std::optional<ParsedToolCalls> parse_tool_calls(ToolCallFormat format, std::string_view text);

// Streaming: where in `text` (a prefix of the answer) a call starts or may start, so that what comes before it
// can be sent as content: the opening tag, a prefix of it at the end of `text`, or (Llama 3, Mistral) the
// JSON at the start of the answer. text.size() when no call can start before the end.
size_t tool_call_start(ToolCallFormat format, std::string_view text);

// "call_" and 24 random letters and digits.
std::string make_tool_call_id();

}  // namespace inflight::server

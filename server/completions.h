// /v1/completions and /v1/chat/completions: request bodies into engine::Requests (every field checked,
// errors naming it), and OpenAI's response, chunk and logprobs shapes out.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/request.h"
#include "engine/tokenizer.h"
#include "server/server_state.h"
#include "server/tool_calls.h"

namespace inflight::server {

enum class Api { Completions, Chat };

struct PromptInput {
  std::vector<int32_t> ids;
  std::string text;  // as given, or decoded from the ids (what echo prepends)
};

struct CompletionRequest {
  Api api = Api::Completions;
  std::vector<PromptInput> prompts;  // chat: exactly one, the rendered conversation
  engine::Request engine;            // everything but prompt_ids and sink; engine.n choices per prompt
  bool stream = false;
  bool include_usage = false;        // stream_options.include_usage: a last chunk with the usage
  bool echo = false;                 // completions: each choice's text starts with its prompt
  bool logprobs = false;             // choices carry logprobs; engine.logprobs alternatives per token
  std::string constraint;            // structured output's kind (structured_output.h), or "tools"; empty: none
  // Chat with tools and a tool_choice other than none (tool_calls.h): the answer is parsed for calls in
  // tool_format; tool_choice required / named also set engine.grammar (constraint "tools").
  bool parse_tool_calls = false;
  ToolCallFormat tool_format = ToolCallFormat::Generic;
  double constraint_compile_seconds = 0;
};

// An ApiError 404 when the body's `model` (optional) names neither the served name nor the --model path.
void check_model(const nlohmann::json& body, const ModelContext& model);

// Throw BadRequest (400, naming the field) or ApiError (404 unknown model, 400 prompt too long).
// `ordered_body`: the same body with the client's key order (what the chat template's `tojson` shows, and the
// order of a JSON schema's properties); null: taken from `body`.
CompletionRequest parse_completion_request(const nlohmann::json& body, const ModelContext& model,
                                           const nlohmann::ordered_json* ordered_body = nullptr);
CompletionRequest parse_chat_request(const nlohmann::json& body, const ModelContext& model,
                                     const nlohmann::ordered_json* ordered_body = nullptr);

// One generated (or echoed) token with what the client asked to know about it.
struct TokenLogprob {
  int32_t token_id = 0;
  bool has_logprob = true;  // false for echoed prompt tokens (null in the response)
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // most likely first
  size_t text_offset = 0;   // bytes into the choice's text where the token's text starts
};

struct ChoiceOutput {
  std::string text;           // with tool_calls: the content before the calls
  std::vector<TokenLogprob> logprobs;
  std::string finish_reason;  // empty until finished
  std::vector<ToolCall> tool_calls;     // chat: the calls parsed out of the answer (finish_reason "tool_calls")
  std::vector<std::string> tool_call_ids;  // [tool_calls] "call_..."
};

// The text of one token as OpenAI shows it: "▁" as a space, byte tokens as their byte.
std::string token_text(const engine::Tokenizer& tokenizer, int32_t id);

nlohmann::json usage_json(const engine::Usage& usage);
// {tokens, token_logprobs, top_logprobs, text_offset} (completions).
nlohmann::json completion_logprobs_json(const engine::Tokenizer& tokenizer, std::span<const TokenLogprob> tokens);
// {content: [{token, logprob, bytes, top_logprobs}]} (chat).
nlohmann::json chat_logprobs_json(const engine::Tokenizer& tokenizer, std::span<const TokenLogprob> tokens);

// What every body and chunk of one response repeats.
struct ResponseMeta {
  Api api = Api::Completions;
  std::string id;
  int64_t created = 0;  // unix seconds
  std::string model;
};

// The non-streaming body; `logprobs` says whether choices carry them (else null).
nlohmann::json response_json(const ResponseMeta& meta, const engine::Tokenizer& tokenizer,
                             std::span<const ChoiceOutput> choices, bool logprobs, const engine::Usage& usage);
// One streamed chunk for choice `index`: `text` (a delta; chat puts it in delta.content), its tokens'
// logprobs (when `logprobs`), and the finish reason once there is one. `first` adds chat's role.
nlohmann::json chunk_json(const ResponseMeta& meta, const engine::Tokenizer& tokenizer, int index,
                          const std::string& text, std::span<const TokenLogprob> tokens, bool logprobs,
                          const std::string& finish_reason, bool first, bool include_usage);
// A streamed chat chunk for choice `index` whose delta is `delta` ({"tool_calls": [...]}, ...).
nlohmann::json delta_chunk_json(const ResponseMeta& meta, int index, nlohmann::json delta,
                                const std::string& finish_reason, bool include_usage);
// One entry of a message's tool_calls: {id, type: "function", function: {name, arguments}}.
nlohmann::json tool_call_json(const ToolCall& call, const std::string& id);

// The last chunk of stream_options.include_usage: no choices, the usage.
nlohmann::json usage_chunk_json(const ResponseMeta& meta, const engine::Usage& usage);

}  // namespace inflight::server

#include "server/completions.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "server/api_error.h"
#include "server/chat_request.h"
#include "server/json_fields.h"
#include "server/structured_output.h"

namespace inflight::server {

using nlohmann::json;

namespace {

constexpr int kMaxPrompts = 256;     // prompts in one /v1/completions request
constexpr int kMaxStopStrings = 16;
constexpr int kMaxLogprobs = 20;     // alternatives per token (the engine's limit)
constexpr int kMaxBeamWidth = 8;

void reject_if_present(const json& body, const char* name, const char* why) {
  const json* v = find_field(body, name);
  if (v == nullptr) return;
  if ((v->is_object() || v->is_array()) && v->empty()) return;
  throw BadRequest(name, std::string(name) + " is not supported" + why);
}

std::vector<int32_t> check_token_ids(const json& list, const ModelContext& model, const std::string& field) {
  std::vector<int32_t> ids;
  ids.reserve(list.size());
  for (const json& v : list) {
    if (!v.is_number_integer()) throw BadRequest(field, field + " must hold token ids (integers)");
    const int64_t id = v.get<int64_t>();
    if (id < 0 || id >= model.vocab_size)
      throw BadRequest(field, field + ": token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                  std::to_string(model.vocab_size) + ")");
    ids.push_back(int32_t(id));
  }
  return ids;
}

// A string, a list of strings, a list of token ids, or a list of lists of token ids.
std::vector<PromptInput> parse_prompts(const json& body, const ModelContext& model) {
  const json* p = find_field(body, "prompt");
  if (p == nullptr) throw BadRequest("prompt", "prompt is required");
  const engine::Tokenizer& tok = *model.tokenizer;
  std::vector<PromptInput> prompts;
  auto from_text = [&](const std::string& text) { prompts.push_back({tok.encode(text, tok.add_bos()), text}); };
  auto from_ids = [&](const json& list, const std::string& field) {
    if (list.empty()) throw BadRequest("prompt", field + " must not be an empty list of tokens");
    PromptInput in;
    in.ids = check_token_ids(list, model, field);
    in.text = tok.decode(in.ids);
    prompts.push_back(std::move(in));
  };
  if (p->is_string()) {
    from_text(p->get<std::string>());
  } else if (p->is_array()) {
    if (p->empty()) throw BadRequest("prompt", "prompt must not be an empty list");
    const json& first = (*p)[0];
    if (first.is_number_integer()) {
      from_ids(*p, "prompt");
    } else {
      if (p->size() > size_t(kMaxPrompts))
        throw BadRequest("prompt", "prompt may list at most " + std::to_string(kMaxPrompts) + " prompts");
      for (size_t i = 0; i < p->size(); ++i) {
        const json& item = (*p)[i];
        const std::string field = "prompt[" + std::to_string(i) + "]";
        if (first.is_string() && item.is_string()) from_text(item.get<std::string>());
        else if (first.is_array() && item.is_array()) from_ids(item, field);
        else throw BadRequest("prompt", field + ": a list of prompts must hold only strings or only lists of token ids");
      }
    }
  } else {
    throw BadRequest("prompt", "prompt must be a string, a list of strings, a list of token ids or a list of lists of token ids");
  }
  return prompts;
}

void check_prompt_length(const std::vector<int32_t>& ids, const ModelContext& model, const char* field) {
  if (int64_t(ids.size()) < model.max_model_len) return;
  throw ApiError(400, "invalid_request_error",
                 "the prompt has " + std::to_string(ids.size()) + " tokens, but this model's maximum context length is " +
                     std::to_string(model.max_model_len) + " tokens (prompt + at least one generated token)",
                 field, "context_length_exceeded");
}

std::vector<std::string> parse_stop(const json& body) {
  const json* v = find_field(body, "stop");
  if (v == nullptr) return {};
  std::vector<std::string> out;
  if (v->is_string()) {
    out.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    if (v->size() > size_t(kMaxStopStrings))
      throw BadRequest("stop", "stop may list at most " + std::to_string(kMaxStopStrings) + " strings");
    for (const json& s : *v) {
      if (!s.is_string()) throw BadRequest("stop", "stop must be a string or a list of strings");
      out.push_back(s.get<std::string>());
    }
  } else {
    throw BadRequest("stop", "stop must be a string or a list of strings");
  }
  for (const std::string& s : out)
    if (s.empty()) throw BadRequest("stop", "stop strings must not be empty");
  return out;
}

// The fields both APIs share: sampling, n, beams, stop conditions, streaming.
void parse_common(const json& body, const ModelContext& model, CompletionRequest* out) {
  engine::Request& r = out->engine;
  engine::SamplingParams& s = r.sampling;
  s.temperature = float(get_number(body, "temperature", 0.0, 2.0).value_or(1.0));
  s.top_p = float(get_number(body, "top_p", 0.0, 1.0).value_or(1.0));
  if (s.top_p <= 0.0f) throw BadRequest("top_p", "top_p must be in (0, 1]");
  s.top_k = int(get_int(body, "top_k", -1, model.vocab_size).value_or(0));
  s.min_p = float(get_number(body, "min_p", 0.0, 1.0).value_or(0.0));
  s.presence_penalty = float(get_number(body, "presence_penalty", -2.0, 2.0).value_or(0.0));
  s.frequency_penalty = float(get_number(body, "frequency_penalty", -2.0, 2.0).value_or(0.0));
  s.repetition_penalty = float(get_number(body, "repetition_penalty", 0.0, 100.0).value_or(1.0));
  if (s.repetition_penalty <= 0.0f) throw BadRequest("repetition_penalty", "repetition_penalty must be > 0");
  if (auto seed = get_int(body, "seed", INT64_MIN, INT64_MAX)) s.seed = uint64_t(*seed);

  const bool beam = get_bool(body, "use_beam_search").value_or(false);
  const int64_t max_n = beam ? kMaxBeamWidth : 128;
  r.n = int(get_int(body, "n", 1, max_n).value_or(1));
  if (auto best_of = get_int(body, "best_of", 1, max_n); best_of && *best_of != r.n)
    throw BadRequest("best_of", "best_of is not supported (other than equal to n)");
  if (beam) {
    r.beam_width = r.n;  // vLLM's extension: n is the beam width, and all n beams are returned
    if (r.n == 1) s.temperature = 0.0f;  // a beam of one is greedy search
    r.length_penalty = float(get_number(body, "length_penalty", -10.0, 10.0).value_or(1.0));
    r.early_stopping = get_bool(body, "early_stopping").value_or(false);
  }

  r.stop.stop = parse_stop(body);
  if (const json* ids = find_field(body, "stop_token_ids")) {
    if (!ids->is_array()) throw BadRequest("stop_token_ids", "stop_token_ids must be a list of token ids");
    r.stop.stop_token_ids = check_token_ids(*ids, model, "stop_token_ids");
  }
  r.stop.ignore_eos = get_bool(body, "ignore_eos").value_or(false);
  r.stop.min_tokens = int(get_int(body, "min_tokens", 0, model.max_model_len).value_or(0));

  out->stream = get_bool(body, "stream").value_or(false);
  if (const json* so = find_field(body, "stream_options")) {
    if (!so->is_object()) throw BadRequest("stream_options", "stream_options must be an object");
    out->include_usage = get_bool(*so, "include_usage").value_or(false);
  }
  reject_if_present(body, "logit_bias", " by this server");
}

// Structured output (structured_output.h): the grammar the engine masks the request's tokens with.
void parse_constraint(const nlohmann::ordered_json& body, CompletionRequest* out) {
  StructuredOutput so = parse_structured_output(body);
  out->engine.grammar = std::move(so.grammar);
  out->constraint = std::move(so.kind);
  out->constraint_compile_seconds = so.compile_seconds;
  if (out->engine.grammar && out->engine.beam_width > 1)
    throw BadRequest("use_beam_search", "structured output does not work with use_beam_search");
}

// Tool calls (tool_calls.h): the format from the template; required / named tool_choice as the grammar.
void parse_tools(const nlohmann::ordered_json& body, const ModelContext& model, CompletionRequest* out) {
  out->tool_format = detect_tool_call_format(model.chat_template->source());
  const auto started = std::chrono::steady_clock::now();  // the tools' schemas to GBNF, then compiled
  ToolRequest tools = parse_tool_request(body, out->tool_format);
  out->parse_tool_calls = tools.mode != ToolChoiceMode::None;
  if (tools.gbnf.empty()) return;
  if (out->engine.grammar)
    throw BadRequest("tool_choice", "tool_choice \"required\" or a named tool cannot be combined with " + out->constraint +
                                        " structured output (one constraint per request)");
  if (out->engine.beam_width > 1) throw BadRequest("tool_choice", "a forced tool call does not work with use_beam_search");
  try {
    out->engine.grammar = engine::grammar::compile_cached(tools.gbnf);
  } catch (const engine::grammar::GrammarError& e) {
    throw BadRequest("tools", std::string("the tools' grammar does not compile: ") + e.what());
  }
  out->constraint = "tools";
  out->constraint_compile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
}

void finish_stop_conditions(CompletionRequest* out, const char* max_tokens_field) {
  engine::StopConditions& stop = out->engine.stop;
  if (stop.min_tokens > stop.max_tokens)
    throw BadRequest("min_tokens", "min_tokens (" + std::to_string(stop.min_tokens) + ") must not exceed " +
                                       max_tokens_field + " (" + std::to_string(stop.max_tokens) + ")");
  if (out->engine.beam_width > 1 && out->logprobs)
    throw BadRequest("logprobs", "logprobs are not supported with use_beam_search");
}

}  // namespace

void check_model(const json& body, const ModelContext& model) {
  const std::optional<std::string> name = get_string(body, "model");
  if (!name || *name == model.served_model_name || (!model.model_path.empty() && *name == model.model_path)) return;
  throw ApiError(404, "invalid_request_error", "The model `" + *name + "` does not exist; this server serves `" +
                                                   model.served_model_name + "`",
                 "model", "model_not_found");
}

CompletionRequest parse_completion_request(const json& body, const ModelContext& model,
                                           const nlohmann::ordered_json* ordered_body) {
  if (!body.is_object()) throw BadRequest("", "the request body must be a JSON object");
  check_model(body, model);
  CompletionRequest out;
  out.api = Api::Completions;
  parse_common(body, model, &out);
  parse_constraint(ordered_body ? *ordered_body : nlohmann::ordered_json(body), &out);
  out.engine.stop.max_tokens = int(get_int(body, "max_tokens", 1, INT32_MAX).value_or(16));
  if (auto lp = get_int(body, "logprobs", 0, kMaxLogprobs)) {
    out.logprobs = true;
    out.engine.logprobs = int(*lp);
  }
  out.echo = get_bool(body, "echo").value_or(false);
  reject_if_present(body, "suffix", " (no fill-in-the-middle)");
  finish_stop_conditions(&out, "max_tokens");
  out.prompts = parse_prompts(body, model);
  for (const PromptInput& p : out.prompts) check_prompt_length(p.ids, model, "prompt");
  return out;
}

CompletionRequest parse_chat_request(const json& body, const ModelContext& model,
                                     const nlohmann::ordered_json* ordered_body) {
  if (!body.is_object()) throw BadRequest("", "the request body must be a JSON object");
  check_model(body, model);
  CompletionRequest out;
  out.api = Api::Chat;
  parse_common(body, model, &out);
  parse_constraint(ordered_body ? *ordered_body : nlohmann::ordered_json(body), &out);
  std::optional<int64_t> max_tokens = get_int(body, "max_completion_tokens", 1, INT32_MAX);
  if (!max_tokens) max_tokens = get_int(body, "max_tokens", 1, INT32_MAX);
  out.logprobs = get_bool(body, "logprobs").value_or(false);
  const std::optional<int64_t> top = get_int(body, "top_logprobs", 0, kMaxLogprobs);
  if (top && !out.logprobs) throw BadRequest("top_logprobs", "top_logprobs needs logprobs set to true");
  if (out.logprobs) out.engine.logprobs = int(top.value_or(0));
  parse_tools(ordered_body ? *ordered_body : nlohmann::ordered_json(body), model, &out);

  const ChatInput input = parse_chat_input(ordered_body ? *ordered_body : nlohmann::ordered_json(body));
  PromptInput prompt = encode_chat_prompt(input, model);
  check_prompt_length(prompt.ids, model, "messages");
  // Unset: up to the end of the context.
  out.engine.stop.max_tokens = int(max_tokens.value_or(model.max_model_len - int64_t(prompt.ids.size())));
  finish_stop_conditions(&out, "max_tokens");
  engine::StopConditions& stop = out.engine.stop;
  const ChatTemplate& tmpl = *model.chat_template;
  for (int32_t id : tmpl.stop_token_ids())
    if (std::find(stop.stop_token_ids.begin(), stop.stop_token_ids.end(), id) == stop.stop_token_ids.end())
      stop.stop_token_ids.push_back(id);
  for (const std::string& s : tmpl.stop_strings()) stop.stop.push_back(s);
  out.prompts.push_back(std::move(prompt));
  return out;
}

std::string token_text(const engine::Tokenizer& tokenizer, int32_t id) { return tokenizer.token_bytes(id); }

json usage_json(const engine::Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

json completion_logprobs_json(const engine::Tokenizer& tokenizer, std::span<const TokenLogprob> tokens) {
  json texts = json::array(), logprobs = json::array(), tops = json::array(), offsets = json::array();
  for (const TokenLogprob& t : tokens) {
    texts.push_back(token_text(tokenizer, t.token_id));
    offsets.push_back(t.text_offset);
    if (!t.has_logprob) {
      logprobs.push_back(nullptr);
      tops.push_back(nullptr);
      continue;
    }
    logprobs.push_back(t.logprob);
    json top = json::object();
    for (const auto& [id, lp] : t.top) {
      const std::string text = token_text(tokenizer, id);
      if (!top.contains(text)) top[text] = lp;  // two ids with one text: the likelier one
    }
    tops.push_back(std::move(top));
  }
  return {{"tokens", texts}, {"token_logprobs", logprobs}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json chat_logprobs_json(const engine::Tokenizer& tokenizer, std::span<const TokenLogprob> tokens) {
  auto entry = [&](int32_t id, float lp) {
    const std::string text = token_text(tokenizer, id);
    json bytes = json::array();
    for (unsigned char c : text) bytes.push_back(int(c));
    return json{{"token", text}, {"logprob", lp}, {"bytes", bytes}};
  };
  json content = json::array();
  for (const TokenLogprob& t : tokens) {
    json e = entry(t.token_id, t.logprob);
    json top = json::array();
    for (const auto& [id, lp] : t.top) top.push_back(entry(id, lp));
    e["top_logprobs"] = std::move(top);
    content.push_back(std::move(e));
  }
  return {{"content", content}};
}

namespace {

json envelope(const ResponseMeta& meta, bool chunk) {
  const char* object = meta.api == Api::Chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  return {{"id", meta.id}, {"object", object}, {"created", meta.created}, {"model", meta.model}};
}

json logprobs_or_null(Api api, const engine::Tokenizer& tokenizer, std::span<const TokenLogprob> tokens, bool logprobs) {
  if (!logprobs) return nullptr;
  return api == Api::Chat ? chat_logprobs_json(tokenizer, tokens) : completion_logprobs_json(tokenizer, tokens);
}

json reason_or_null(const std::string& reason) { return reason.empty() ? json(nullptr) : json(reason); }

}  // namespace

json response_json(const ResponseMeta& meta, const engine::Tokenizer& tokenizer, std::span<const ChoiceOutput> choices,
                   bool logprobs, const engine::Usage& usage) {
  json body = envelope(meta, false);
  json list = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceOutput& c = choices[i];
    json choice = {{"index", i}};
    if (meta.api == Api::Chat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
      if (!c.tool_calls.empty()) {
        if (c.text.empty()) choice["message"]["content"] = nullptr;
        json calls = json::array();
        for (size_t k = 0; k < c.tool_calls.size(); ++k) calls.push_back(tool_call_json(c.tool_calls[k], c.tool_call_ids[k]));
        choice["message"]["tool_calls"] = std::move(calls);
      }
    } else {
      choice["text"] = c.text;
    }
    choice["logprobs"] = logprobs_or_null(meta.api, tokenizer, c.logprobs, logprobs);
    choice["finish_reason"] = reason_or_null(c.finish_reason);
    list.push_back(std::move(choice));
  }
  body["choices"] = std::move(list);
  body["usage"] = usage_json(usage);
  return body;
}

json chunk_json(const ResponseMeta& meta, const engine::Tokenizer& tokenizer, int index, const std::string& text,
                std::span<const TokenLogprob> tokens, bool logprobs, const std::string& finish_reason, bool first,
                bool include_usage) {
  json body = envelope(meta, true);
  json choice = {{"index", index}};
  if (meta.api == Api::Chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || (first && finish_reason.empty())) delta["content"] = text;
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = logprobs_or_null(meta.api, tokenizer, tokens, logprobs && !tokens.empty());
  choice["finish_reason"] = reason_or_null(finish_reason);
  body["choices"] = json::array({std::move(choice)});
  if (include_usage) body["usage"] = nullptr;
  return body;
}

json delta_chunk_json(const ResponseMeta& meta, int index, json delta, const std::string& finish_reason,
                      bool include_usage) {
  json body = envelope(meta, true);
  body["choices"] = json::array(
      {{{"index", index}, {"delta", std::move(delta)}, {"logprobs", nullptr}, {"finish_reason", reason_or_null(finish_reason)}}});
  if (include_usage) body["usage"] = nullptr;
  return body;
}

json tool_call_json(const ToolCall& call, const std::string& id) {
  return {{"id", id}, {"type", "function"}, {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
}

json usage_chunk_json(const ResponseMeta& meta, const engine::Usage& usage) {
  json body = envelope(meta, true);
  body["choices"] = json::array();
  body["usage"] = usage_json(usage);
  return body;
}

}  // namespace inflight::server

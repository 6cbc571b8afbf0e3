#include "client/openai_stream.h"

#include <nlohmann/json.hpp>

namespace inflight::client {

namespace {

// The error message of an OpenAI envelope {"error": {"message"}} or a bare {"error": "text"}.
std::string error_message(const nlohmann::json& error) {
  if (error.is_string()) return error.get<std::string>();
  if (error.is_object() && error.contains("message") && error["message"].is_string())
    return error["message"].get<std::string>();
  return error.dump();
}

}  // namespace

void OpenAiStreamReader::on_event(std::string_view data, double t_s) {
  if (data == "[DONE]") {
    saw_done_ = true;
    return;
  }
  if (!error_.empty()) return;
  const nlohmann::json chunk = nlohmann::json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (chunk.is_discarded() || !chunk.is_object()) {
    error_ = "malformed stream chunk: " + std::string(data.substr(0, 200));
    return;
  }
  if (auto it = chunk.find("error"); it != chunk.end() && !it->is_null()) {
    error_ = "error chunk in the stream: " + error_message(*it);
    return;
  }
  if (auto it = chunk.find("usage"); it != chunk.end() && it->is_object()) {
    usage_prompt_ = it->value("prompt_tokens", int64_t(-1));
    usage_completion_ = it->value("completion_tokens", int64_t(-1));
  }
  const auto choices = chunk.find("choices");
  if (choices == chunk.end() || !choices->is_array() || choices->empty()) return;
  const nlohmann::json& choice = (*choices)[0];
  std::string piece;
  if (api_ == ApiKind::Completions) {
    if (auto t = choice.find("text"); t != choice.end() && t->is_string()) piece = t->get<std::string>();
  } else {
    const auto delta = choice.find("delta");
    if (delta == choice.end() || !delta->is_object()) return;
    const auto content = delta->find("content");
    if (content == delta->end() || !content->is_string()) return;
    piece = content->get<std::string>();
  }
  // A bare finish marker (empty text with a finish_reason, sent after the last token by servers that hold
  // back nothing) is no token: counting it would add a ~0 gap to ITL and stretch the latency.
  const auto finish = choice.find("finish_reason");
  if (piece.empty() && finish != choice.end() && !finish->is_null()) return;
  if (num_chunks_ == 0) first_t_ = t_s;
  else itl_s_.push_back(t_s - last_t_);
  last_t_ = t_s;
  ++num_chunks_;
  text_ += piece;
}

void OpenAiStreamReader::finish(int64_t client_prompt_tokens, RequestOutcome* out) {
  out->num_chunks = num_chunks_;
  out->generated_text = std::move(text_);
  if (!error_.empty()) {
    out->success = false;
    out->error = error_;
    return;
  }
  if (num_chunks_ == 0) {
    out->success = false;
    out->error = "the stream ended without a token-carrying chunk";
    return;
  }
  out->success = true;
  out->ttft_s = first_t_;
  out->latency_s = last_t_;
  out->itl_s = std::move(itl_s_);
  out->usage_reported = usage_prompt_ >= 0 && usage_completion_ >= 0;
  out->prompt_tokens = usage_prompt_ >= 0 ? usage_prompt_ : client_prompt_tokens;
  out->output_tokens = usage_completion_ >= 0 ? usage_completion_ : num_chunks_;
}

}  // namespace inflight::client

// POST /tokenize and POST /detokenize, in vLLM's shapes:
//   {model?, prompt, add_special_tokens = true, return_token_strs = false}
//   {model?, messages, add_generation_prompt = true, ...}  (the chat template's prompt, as chat completions
//                                                           would run it)
//     -> {count, max_model_len, tokens, token_strs}
//   {model?, tokens} -> {prompt}
#pragma once
#include <nlohmann/json.hpp>

#include "server/server_state.h"

namespace inflight::server {

// Throw BadRequest (400, naming the field) or ApiError (404 for another model). `ordered`: the same body
// in the client's key order (what a template's tools | tojson shows), when the caller has it.
nlohmann::json tokenize_response(const nlohmann::json& body, const ModelContext& model,
                                 const nlohmann::ordered_json* ordered = nullptr);
nlohmann::json detokenize_response(const nlohmann::json& body, const ModelContext& model);

}  // namespace inflight::server

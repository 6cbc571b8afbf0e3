// The conversation of a /v1/chat/completions request (and of anything else that takes `messages`): its
// fields checked and turned into the chat template's input, then rendered and encoded.
#pragma once
#include <nlohmann/json.hpp>

#include "server/chat_template.h"
#include "server/completions.h"
#include "server/server_state.h"

namespace inflight::server {

// messages (roles system, developer (as system), user, assistant, tool; content a string, null where an
// assistant calls tools, or text parts, which are joined), tools (a list of objects), chat_template_kwargs
// (an object of extra template variables, e.g. enable_thinking), add_generation_prompt (default true).
// `body` keeps the client's key order, which tools | tojson shows. Throws BadRequest naming the field.
ChatInput parse_chat_input(const nlohmann::ordered_json& body);

// The conversation rendered with the model's template and encoded. A template that refuses the
// conversation (raise_exception) or fails on it is a 400 with its message (param "messages").
PromptInput encode_chat_prompt(const ChatInput& input, const ModelContext& model);

}  // namespace inflight::server

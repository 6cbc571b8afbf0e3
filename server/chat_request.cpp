#include "server/chat_request.h"

#include <string>

#include "server/api_error.h"

namespace inflight::server {

using nlohmann::ordered_json;

namespace {

// A string, or a list of {type: "text", text} parts joined.
std::string message_content(const ordered_json& content, const std::string& field) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) throw BadRequest("messages", field + " must be a string or a list of content parts");
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const ordered_json& part = content[i];
    const std::string pf = field + "[" + std::to_string(i) + "]";
    if (!part.is_object()) throw BadRequest("messages", pf + " must be an object");
    auto type = part.find("type");
    if (type == part.end() || !type->is_string() || *type != "text")
      throw BadRequest("messages", pf + ": only content parts of type \"text\" are supported");
    auto t = part.find("text");
    if (t == part.end() || !t->is_string()) throw BadRequest("messages", pf + ".text must be a string");
    text += t->get<std::string>();
  }
  return text;
}

ordered_json parse_message(const ordered_json& msg, const std::string& field) {
  if (!msg.is_object()) throw BadRequest("messages", field + " must be an object");
  auto role = msg.find("role");
  if (role == msg.end() || !role->is_string()) throw BadRequest("messages", field + ".role must be a string");
  std::string r = role->get<std::string>();
  if (r == "developer") r = "system";
  if (r != "system" && r != "user" && r != "assistant" && r != "tool")
    throw BadRequest("messages", field + ".role must be system, developer, user, assistant or tool, got \"" + r + "\"");
  ordered_json out = msg;  // every other field (tool_calls, tool_call_id, name, reasoning_content) as given
  out["role"] = r;
  auto content = msg.find("content");
  if (content == msg.end() || content->is_null()) {
    if (r != "assistant") throw BadRequest("messages", field + ".content is required");
    out["content"] = nullptr;
  } else {
    out["content"] = message_content(*content, field + ".content");
  }
  if (auto calls = msg.find("tool_calls"); calls != msg.end() && !calls->is_null()) {
    if (r != "assistant") throw BadRequest("messages", field + ".tool_calls: only assistant messages call tools");
    if (!calls->is_array()) throw BadRequest("messages", field + ".tool_calls must be a list");
    for (size_t i = 0; i < calls->size(); ++i)
      if (!(*calls)[i].is_object()) throw BadRequest("messages", field + ".tool_calls[" + std::to_string(i) + "] must be an object");
  }
  return out;
}

}  // namespace

ChatInput parse_chat_input(const ordered_json& body) {
  ChatInput input;
  auto m = body.find("messages");
  if (m == body.end() || m->is_null()) throw BadRequest("messages", "messages is required");
  if (!m->is_array() || m->empty()) throw BadRequest("messages", "messages must be a non-empty list");
  for (size_t i = 0; i < m->size(); ++i) input.messages.push_back(parse_message((*m)[i], "messages[" + std::to_string(i) + "]"));

  if (auto tools = body.find("tools"); tools != body.end() && !tools->is_null()) {
    if (!tools->is_array()) throw BadRequest("tools", "tools must be a list");
    for (size_t i = 0; i < tools->size(); ++i)
      if (!(*tools)[i].is_object()) throw BadRequest("tools", "tools[" + std::to_string(i) + "] must be an object");
    if (!tools->empty()) input.tools = *tools;
  }
  if (auto kwargs = body.find("chat_template_kwargs"); kwargs != body.end() && !kwargs->is_null()) {
    if (!kwargs->is_object()) throw BadRequest("chat_template_kwargs", "chat_template_kwargs must be an object");
    input.kwargs = *kwargs;
  }
  if (auto agp = body.find("add_generation_prompt"); agp != body.end() && !agp->is_null()) {
    if (!agp->is_boolean()) throw BadRequest("add_generation_prompt", "add_generation_prompt must be a boolean");
    input.add_generation_prompt = agp->get<bool>();
  }
  return input;
}

PromptInput encode_chat_prompt(const ChatInput& input, const ModelContext& model) {
  const ChatTemplate& tmpl = *model.chat_template;
  PromptInput prompt;
  try {
    prompt.text = tmpl.render(input);
  } catch (const jinja::Error& e) {
    throw BadRequest("messages", std::string(e.kind() == jinja::Error::Kind::Raised ? "the chat template refused the "
                                                                                       "conversation: "
                                                                                     : "the chat template failed: ") +
                                     e.what());
  }
  prompt.ids = tmpl.encode(prompt.text);
  return prompt;
}

}  // namespace inflight::server

#include "server/tokenize.h"

#include "server/api_error.h"
#include "server/chat_request.h"
#include "server/completions.h"
#include "server/json_fields.h"

namespace inflight::server {

using nlohmann::json;

json tokenize_response(const json& body, const ModelContext& model, const nlohmann::ordered_json* ordered) {
  if (!body.is_object()) throw BadRequest("", "the request body must be a JSON object");
  check_model(body, model);
  const engine::Tokenizer& tok = *model.tokenizer;
  const json* prompt = find_field(body, "prompt");
  const json* messages = find_field(body, "messages");
  if ((prompt == nullptr) == (messages == nullptr))
    throw BadRequest(prompt ? "messages" : "prompt", "give either prompt (a string) or messages (a conversation)");
  std::vector<int32_t> ids;
  if (prompt != nullptr) {
    if (!prompt->is_string()) throw BadRequest("prompt", "prompt must be a string");
    const bool add_special = get_bool(body, "add_special_tokens").value_or(true);
    ids = tok.encode(prompt->get<std::string>(), add_special && tok.add_bos());
  } else {
    // The template writes the special tokens of a conversation itself.
    if (get_bool(body, "add_special_tokens").value_or(false))
      throw BadRequest("add_special_tokens", "add_special_tokens must be false with messages (the chat template adds them)");
    nlohmann::ordered_json chat = ordered != nullptr ? *ordered : nlohmann::ordered_json(body);
    chat.erase("add_special_tokens");
    chat.erase("return_token_strs");
    ids = encode_chat_prompt(parse_chat_input(chat), model).ids;
  }
  json strs = nullptr;
  if (get_bool(body, "return_token_strs").value_or(false)) {
    strs = json::array();
    for (int32_t id : ids) strs.push_back(tok.piece(id));
  }
  return {{"count", ids.size()}, {"max_model_len", model.max_model_len}, {"tokens", ids}, {"token_strs", strs}};
}

json detokenize_response(const json& body, const ModelContext& model) {
  if (!body.is_object()) throw BadRequest("", "the request body must be a JSON object");
  check_model(body, model);
  const json* tokens = find_field(body, "tokens");
  if (tokens == nullptr) throw BadRequest("tokens", "tokens is required");
  if (!tokens->is_array()) throw BadRequest("tokens", "tokens must be a list of token ids");
  std::vector<int32_t> ids;
  ids.reserve(tokens->size());
  for (const json& v : *tokens) {
    if (!v.is_number_integer()) throw BadRequest("tokens", "tokens must hold token ids (integers)");
    const int64_t id = v.get<int64_t>();
    if (id < 0 || id >= model.tokenizer->vocab_size())
      throw BadRequest("tokens", "tokens: token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                     std::to_string(model.tokenizer->vocab_size()) + ")");
    ids.push_back(int32_t(id));
  }
  return {{"prompt", model.tokenizer->decode(ids)}};
}

}  // namespace inflight::server

// Chat templates: the model's own Jinja template (GGUF tokenizer.chat_template, or an HF folder's
// chat_template.jinja / tokenizer_config.json "chat_template"), a built-in one by name, or a file, rendered
// by the Jinja engine (server/jinja/) as Hugging Face's transformers does: with messages, tools,
// add_generation_prompt, bos_token, eos_token and extra variables (chat_template_kwargs). The rendered
// text carries control tokens inline ("<|im_start|>"); encoding turns them into their ids.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/tokenizer.h"
#include "server/jinja/template.h"

namespace inflight::server {

// The built-in templates (server/chat_templates/NAME.jinja, compiled in), the fallback for models without
// one: "llama2, mistral, chatml, zephyr, llama3, phi3, gemma".
std::string chat_template_names();
// The Jinja source of a built-in; nullptr when `name` is none of them.
const std::string* builtin_chat_template(std::string_view name);

// Where a template came from and its source.
struct ChatTemplateSource {
  std::string source;
  std::string origin;  // for logs and errors: "built-in llama2", "the model's", "file /path/t.jinja"
};
// The template a `chat_template` setting chooses: "auto" (the model's own, else llama2), a built-in's
// name, or a file holding a Jinja template. Throws std::invalid_argument for a file that cannot be read.
ChatTemplateSource choose_chat_template(const std::string& setting, const std::string& model_template);

// One render: the conversation and what else the template sees.
struct ChatInput {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // [{role, content, tool_calls, ...}]
  nlohmann::ordered_json tools;                                      // null (None) or a list of tools
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();   // extra variables (enable_thinking, ...)
  bool add_generation_prompt = true;
};

// A template bound to a tokenizer: renders and encodes, turning control pieces in the rendered text
// into their ids (llama.cpp's parse_special) and everything else into ordinary tokens.
class ChatTemplate {
 public:
  // Throws jinja::Error (Syntax) for a malformed template.
  ChatTemplate(const ChatTemplateSource& source, const engine::Tokenizer& tokenizer);

  const std::string& origin() const { return origin_; }
  // The Jinja source (what the tool-call format is picked from, tool_calls.h).
  const std::string& source() const { return source_; }
  // Throws jinja::Error: Raised (the template's raise_exception) or Render (a type error, an undefined call).
  std::string render(const ChatInput& input) const;
  // Token ids of rendered text: BOS first when the tokenizer adds one (a BOS the template rendered at the
  // start is that one), control pieces as their ids.
  std::vector<int32_t> encode(std::string_view rendered) const;
  // How a turn ends besides EOS: end-of-turn markers the template writes ("<|im_end|>", "<|eot_id|>",
  // ...); markers that are one control token stop as ids, the others as text.
  const std::vector<int32_t>& stop_token_ids() const { return stop_token_ids_; }
  const std::vector<std::string>& stop_strings() const { return stop_strings_; }

 private:
  std::string origin_;
  std::string source_;
  std::shared_ptr<const jinja::Template> template_;
  const engine::Tokenizer* tokenizer_;
  std::string bos_, eos_;                                        // pieces the template sees as bos_token / eos_token
  std::vector<std::pair<std::string, int32_t>> control_pieces_;  // longest piece first
  std::vector<int32_t> stop_token_ids_;
  std::vector<std::string> stop_strings_;
};

}  // namespace inflight::server

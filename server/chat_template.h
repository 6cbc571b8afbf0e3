// Chat templates, rendered in C++ (no Jinja): the GGUF `tokenizer.chat_template` (or HF
// tokenizer_config.json "chat_template") is only read to recognise which well-known template it is, by
// distinctive substrings, as llama.cpp does. Unrecognised or absent: the Llama-2 [INST] template.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/tokenizer.h"

namespace inflight::server {

enum class ChatTemplateKind { Llama2, Mistral, ChatML, Zephyr, Llama3, Phi3, Gemma };

const char* chat_template_name(ChatTemplateKind kind);  // "llama2", "mistral", "chatml", ...
std::optional<ChatTemplateKind> parse_chat_template_name(std::string_view name);
// The template a Jinja source is, or nullopt when none is recognised.
std::optional<ChatTemplateKind> detect_chat_template(std::string_view jinja);
// Names for messages: "llama2, mistral, chatml, zephyr, llama3, phi3, gemma".
std::string chat_template_names();

struct ChatMessage {
  std::string role;     // "system", "user" or "assistant"
  std::string content;
};

// Control-token pieces the rendering writes inline ("<s>", "</s>", "<|im_end|>", ...).
struct ChatSpecialPieces {
  std::string bos = "<s>";
  std::string eos = "</s>";
};

// The conversation as prompt text with control pieces inline, ending with the opening of the
// assistant's turn. The leading BOS is left to the encoder (added when the tokenizer adds one).
std::string render_chat(ChatTemplateKind kind, std::span<const ChatMessage> messages, const ChatSpecialPieces& pieces);

// End-of-turn markers of a template besides EOS (e.g. "<|im_end|>").
std::vector<std::string> chat_end_markers(ChatTemplateKind kind);

// A template bound to a tokenizer: renders and encodes, turning control pieces in the rendered text
// into their ids (llama.cpp's parse_special) and everything else into ordinary tokens.
class ChatTemplate {
 public:
  ChatTemplate(ChatTemplateKind kind, const engine::Tokenizer& tokenizer);

  ChatTemplateKind kind() const { return kind_; }
  std::string render(std::span<const ChatMessage> messages) const;
  std::vector<int32_t> encode(std::span<const ChatMessage> messages) const;
  // How a turn ends besides EOS: markers that are one control token stop as ids, the others as text.
  const std::vector<int32_t>& stop_token_ids() const { return stop_token_ids_; }
  const std::vector<std::string>& stop_strings() const { return stop_strings_; }

 private:
  ChatTemplateKind kind_;
  const engine::Tokenizer* tokenizer_;
  ChatSpecialPieces pieces_;
  std::vector<std::pair<std::string, int32_t>> control_pieces_;  // longest piece first
  std::vector<int32_t> stop_token_ids_;
  std::vector<std::string> stop_strings_;
};

}  // namespace inflight::server

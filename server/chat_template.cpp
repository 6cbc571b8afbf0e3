#include "server/chat_template.h"

#include <algorithm>
#include <array>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "server/chat_templates_builtin.h"

namespace inflight::server {

namespace {

// End-of-turn markers of well-known templates (besides EOS); a template that writes one stops there.
constexpr std::array<std::string_view, 6> kEndOfTurnMarkers = {
    "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>", "<end_of_turn>", "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"};

}  // namespace

std::string chat_template_names() {
  std::string names;
  for (const BuiltinChatTemplate& t : builtin_chat_templates()) names += (names.empty() ? "" : ", ") + std::string(t.name);
  return names;
}

const std::string* builtin_chat_template(std::string_view name) {
  for (const BuiltinChatTemplate& t : builtin_chat_templates())
    if (name == t.name) return &t.source;
  return nullptr;
}

ChatTemplateSource choose_chat_template(const std::string& setting, const std::string& model_template) {
  if (setting == "auto") {
    if (!model_template.empty()) return {model_template, "the model's"};
    return {*builtin_chat_template("llama2"), "built-in llama2 (the model has none)"};
  }
  if (const std::string* builtin = builtin_chat_template(setting)) return {*builtin, "built-in " + setting};
  std::ifstream in(setting, std::ios::binary);
  if (!in) throw std::invalid_argument("chat template '" + setting + "': neither a built-in (" + chat_template_names() +
                                       ") nor a readable file");
  std::ostringstream text;
  text << in.rdbuf();
  return {text.str(), "file " + setting};
}

ChatTemplate::ChatTemplate(const ChatTemplateSource& source, const engine::Tokenizer& tokenizer)
    : origin_(source.origin),
      source_(source.source),
      template_(std::make_shared<const jinja::Template>(source.source)),
      tokenizer_(&tokenizer) {
  // Control tokens are the pieces that decode to no text; only bracketed ones can appear in a template.
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    const std::string piece = tokenizer.piece(id);
    if (piece.size() < 3) continue;
    const bool bracketed = (piece.front() == '<' && piece.back() == '>') || (piece.front() == '[' && piece.back() == ']');
    if (!bracketed || piece.rfind("<0x", 0) == 0) continue;
    const int32_t ids[] = {id};
    if (tokenizer.decode(ids).empty()) control_pieces_.emplace_back(piece, id);
  }
  std::stable_sort(control_pieces_.begin(), control_pieces_.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  bos_ = tokenizer.bos_id() >= 0 && tokenizer.bos_id() < tokenizer.vocab_size() ? tokenizer.piece(tokenizer.bos_id()) : "<s>";
  eos_ = tokenizer.eos_id() >= 0 && tokenizer.eos_id() < tokenizer.vocab_size() ? tokenizer.piece(tokenizer.eos_id()) : "</s>";
  for (std::string_view marker : kEndOfTurnMarkers) {
    if (source.source.find(marker) == std::string::npos || marker == eos_) continue;
    auto it = std::find_if(control_pieces_.begin(), control_pieces_.end(), [&](const auto& c) { return c.first == marker; });
    if (it != control_pieces_.end()) stop_token_ids_.push_back(it->second);
    else stop_strings_.emplace_back(marker);
  }
}

std::string ChatTemplate::render(const ChatInput& input) const {
  // transformers' variables: the extra ones first, so that none of them replaces the conversation.
  jinja::Object context;
  for (auto it = input.kwargs.begin(); it != input.kwargs.end(); ++it) context.set(it.key(), jinja::from_json(it.value()));
  context.set("messages", jinja::from_json(input.messages));
  context.set("tools", jinja::from_json(input.tools));
  context.set("add_generation_prompt", jinja::Value(input.add_generation_prompt));
  context.set("bos_token", jinja::Value(bos_));
  context.set("eos_token", jinja::Value(eos_));
  return template_->render(jinja::Value(std::move(context)));
}

std::vector<int32_t> ChatTemplate::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  if (tokenizer_->add_bos()) ids.push_back(tokenizer_->bos_id());
  size_t segment_start = 0;
  auto flush_text = [&](size_t end) {
    if (end > segment_start) {
      const std::vector<int32_t> part = tokenizer_->encode(text.substr(segment_start, end - segment_start), false);
      ids.insert(ids.end(), part.begin(), part.end());
    }
  };
  for (size_t pos = 0; pos < text.size();) {
    const char c = text[pos];
    const std::pair<std::string, int32_t>* match = nullptr;
    if (c == '<' || c == '[') {
      for (const auto& cp : control_pieces_)
        if (text.compare(pos, cp.first.size(), cp.first) == 0) {
          match = &cp;
          break;
        }
    }
    if (match == nullptr) {
      ++pos;
      continue;
    }
    flush_text(pos);
    // A rendered leading BOS is the one the tokenizer already added.
    if (!(match->second == tokenizer_->bos_id() && ids.size() == 1 && ids[0] == match->second))
      ids.push_back(match->second);
    pos += match->first.size();
    segment_start = pos;
  }
  flush_text(text.size());
  return ids;
}

}  // namespace inflight::server

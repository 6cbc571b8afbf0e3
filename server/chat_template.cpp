#include "server/chat_template.h"

#include <algorithm>
#include <array>

namespace inflight::server {

namespace {

struct NamedKind {
  const char* name;
  ChatTemplateKind kind;
};
constexpr std::array<NamedKind, 7> kKinds = {{{"llama2", ChatTemplateKind::Llama2},
                                              {"mistral", ChatTemplateKind::Mistral},
                                              {"chatml", ChatTemplateKind::ChatML},
                                              {"zephyr", ChatTemplateKind::Zephyr},
                                              {"llama3", ChatTemplateKind::Llama3},
                                              {"phi3", ChatTemplateKind::Phi3},
                                              {"gemma", ChatTemplateKind::Gemma}}};

bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

// System messages are folded into the next user turn by the templates that have no system role.
std::string take(std::string& pending) {
  std::string out = std::move(pending);
  pending.clear();
  return out;
}

void append_system(std::string& pending, const std::string& content) {
  if (!pending.empty()) pending += "\n";
  pending += content;
}

// [INST] templates: Llama 2 puts the system prompt in a <<SYS>> block, Mistral before the user text.
std::string render_inst(bool llama2, std::span<const ChatMessage> messages, const ChatSpecialPieces& p) {
  std::string out, system;
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      append_system(system, m.content);
    } else if (m.role == "user") {
      if (llama2 && !out.empty()) out += p.bos;  // Llama 2 opens every later turn with BOS
      out += "[INST] ";
      if (!system.empty())
        out += llama2 ? "<<SYS>>\n" + take(system) + "\n<</SYS>>\n\n" : take(system) + "\n\n";
      out += m.content + " [/INST]";
    } else {
      out += llama2 ? " " + m.content + " " + p.eos : " " + m.content + p.eos;
    }
  }
  return out;
}

}  // namespace

const char* chat_template_name(ChatTemplateKind kind) {
  for (const NamedKind& k : kKinds)
    if (k.kind == kind) return k.name;
  return "?";
}

std::optional<ChatTemplateKind> parse_chat_template_name(std::string_view name) {
  for (const NamedKind& k : kKinds)
    if (name == k.name) return k.kind;
  return std::nullopt;
}

std::string chat_template_names() {
  std::string names;
  for (const NamedKind& k : kKinds) names += (names.empty() ? "" : ", ") + std::string(k.name);
  return names;
}

std::optional<ChatTemplateKind> detect_chat_template(std::string_view t) {
  // Order matters: the more specific markers first (Phi-3 also has <|user|>, like Zephyr).
  if (contains(t, "<|im_start|>")) return ChatTemplateKind::ChatML;
  if (contains(t, "<|start_header_id|>") && contains(t, "<|end_header_id|>")) return ChatTemplateKind::Llama3;
  if (contains(t, "[INST]")) return contains(t, "<<SYS>>") ? ChatTemplateKind::Llama2 : ChatTemplateKind::Mistral;
  if (contains(t, "<|assistant|>") && contains(t, "<|end|>")) return ChatTemplateKind::Phi3;
  if (contains(t, "<|user|>")) return ChatTemplateKind::Zephyr;
  if (contains(t, "<start_of_turn>")) return ChatTemplateKind::Gemma;
  return std::nullopt;
}

std::string render_chat(ChatTemplateKind kind, std::span<const ChatMessage> messages, const ChatSpecialPieces& p) {
  std::string out;
  switch (kind) {
    case ChatTemplateKind::Llama2:
      return render_inst(true, messages, p);
    case ChatTemplateKind::Mistral:
      return render_inst(false, messages, p);
    case ChatTemplateKind::ChatML:
      for (const ChatMessage& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      return out + "<|im_start|>assistant\n";
    case ChatTemplateKind::Zephyr:
      for (const ChatMessage& m : messages) out += "<|" + m.role + "|>\n" + m.content + p.eos + "\n";
      return out + "<|assistant|>\n";
    case ChatTemplateKind::Llama3:
      for (const ChatMessage& m : messages)
        out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + m.content + "<|eot_id|>";
      return out + "<|start_header_id|>assistant<|end_header_id|>\n\n";
    case ChatTemplateKind::Phi3:
      for (const ChatMessage& m : messages) out += "<|" + m.role + "|>\n" + m.content + "<|end|>\n";
      return out + "<|assistant|>\n";
    case ChatTemplateKind::Gemma: {
      std::string system;
      for (const ChatMessage& m : messages) {
        if (m.role == "system") {
          append_system(system, m.content);
          continue;
        }
        const bool user = m.role == "user";
        const std::string content = user && !system.empty() ? take(system) + "\n\n" + m.content : m.content;
        out += std::string("<start_of_turn>") + (user ? "user" : "model") + "\n" + content + "<end_of_turn>\n";
      }
      return out + "<start_of_turn>model\n";
    }
  }
  return out;
}

std::vector<std::string> chat_end_markers(ChatTemplateKind kind) {
  switch (kind) {
    case ChatTemplateKind::ChatML: return {"<|im_end|>"};
    case ChatTemplateKind::Llama3: return {"<|eot_id|>"};
    case ChatTemplateKind::Phi3: return {"<|end|>"};
    case ChatTemplateKind::Gemma: return {"<end_of_turn>"};
    default: return {};
  }
}

ChatTemplate::ChatTemplate(ChatTemplateKind kind, const engine::Tokenizer& tokenizer)
    : kind_(kind), tokenizer_(&tokenizer) {
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
  if (tokenizer.bos_id() >= 0 && tokenizer.bos_id() < tokenizer.vocab_size()) pieces_.bos = tokenizer.piece(tokenizer.bos_id());
  if (tokenizer.eos_id() >= 0 && tokenizer.eos_id() < tokenizer.vocab_size()) pieces_.eos = tokenizer.piece(tokenizer.eos_id());
  for (const std::string& marker : chat_end_markers(kind)) {
    auto it = std::find_if(control_pieces_.begin(), control_pieces_.end(),
                           [&](const auto& c) { return c.first == marker; });
    if (it != control_pieces_.end()) stop_token_ids_.push_back(it->second);
    else stop_strings_.push_back(marker);
  }
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages) const {
  return render_chat(kind_, messages, pieces_);
}

std::vector<int32_t> ChatTemplate::encode(std::span<const ChatMessage> messages) const {
  const std::string text = render(messages);
  std::vector<int32_t> ids;
  if (tokenizer_->add_bos()) ids.push_back(tokenizer_->bos_id());
  size_t segment_start = 0;
  auto flush_text = [&](size_t end) {
    if (end > segment_start) {
      const std::vector<int32_t> part = tokenizer_->encode(std::string_view(text).substr(segment_start, end - segment_start), false);
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

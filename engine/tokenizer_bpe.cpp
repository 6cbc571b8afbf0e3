#include "engine/tokenizer_bpe.h"

#include <algorithm>
#include <cstdio>
#include <queue>
#include <stdexcept>

#include "engine/load_error.h"
#include "engine/tokenizer.h"
#include "engine/unicode_text.h"

namespace inflight::engine {

using nlohmann::json;

namespace {

// GGUF token types (llama.cpp's llama_token_type).
constexpr int32_t kTypeControl = 3, kTypeUserDefined = 4;

// The pre-tokenizers of GGUF's tokenizer.ggml.pre names, as tokenizer.json would write them.
struct KnownPre {
  const char* name;
  json spec;
};
const std::vector<KnownPre>& known_pres() {
  auto split_then_bytes = [](const char* regex) {
    return json{{"type", "Sequence"},
                {"pretokenizers",
                 {{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}},
                  {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  };
  static const std::vector<KnownPre> pres = {
      {"gpt-2", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"llama-bpe", split_then_bytes(kLlama3SplitPattern)},
      {"qwen2", split_then_bytes(kQwen2SplitPattern)},
      {"smollm",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Digits"}, {"individual_digits", true}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}}}}},
  };
  return pres;
}

// The fields that decide what a pre-tokenizer does (trim_offsets and the like only move offsets).
json canonical_pre(const json& j) {
  if (!j.is_object()) return j;
  json out = json::object();
  for (const char* key : {"type", "pattern", "behavior", "invert", "add_prefix_space", "use_regex", "individual_digits"})
    if (j.contains(key)) out[key] = j[key];
  if (j.contains("pretokenizers") && j["pretokenizers"].is_array()) {
    out["pretokenizers"] = json::array();
    for (const json& p : j["pretokenizers"]) out["pretokenizers"].push_back(canonical_pre(p));
  }
  const std::string type = out.value("type", "");
  if (type == "ByteLevel") {
    out["add_prefix_space"] = j.value("add_prefix_space", false);
    out["use_regex"] = j.value("use_regex", true);
  }
  if (type == "Split") {
    out["behavior"] = j.value("behavior", "Isolated");
    out["invert"] = j.value("invert", false);
  }
  return out;
}

std::string gguf_pre_name(const json& pre) {
  const json c = canonical_pre(pre);
  for (const KnownPre& k : known_pres())
    if (canonical_pre(k.spec) == c) return k.name;
  return "";
}

// tokenizer_config.json's bos_token / eos_token: a string or {"content": ...}.
std::string special_content(const json& config, const char* key) {
  if (!config.is_object() || !config.contains(key)) return "";
  const json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return "";
}

bool is_whitespace_byte(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

}  // namespace

BpeSpec bpe_spec_from_json(const json& tok, const json& config, const std::string& where) {
  BpeSpec spec;
  try {
    if (!tok.is_object() || !tok.contains("model") || !tok["model"].is_object())
      throw std::invalid_argument("no \"model\" object");
    const json& model = tok["model"];
    const std::string type = model.value("type", std::string("BPE"));
    if (type != "BPE")
      throw std::invalid_argument("unsupported model type '" + type + "' (supported: BPE)");
    if (!model.contains("vocab") || !model["vocab"].is_object()) throw std::invalid_argument("model.vocab must be an object");
    if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"].get<double>() != 0.0)
      throw std::invalid_argument("BPE dropout is not supported");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
      if (model.contains(key) && model[key].is_string() && !model[key].get<std::string>().empty())
        throw std::invalid_argument(std::string("model.") + key + " is not supported");
    int64_t max_id = -1;
    std::vector<std::pair<int64_t, std::string>> entries;
    for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) {
      if (!it->is_number_integer()) throw std::invalid_argument("model.vocab['" + it.key() + "'] is not an integer id");
      const int64_t id = it->get<int64_t>();
      if (id < 0 || id >= (int64_t(1) << 24)) throw std::invalid_argument("model.vocab id " + std::to_string(id) + " out of range");
      entries.emplace_back(id, it.key());
      max_id = std::max(max_id, id);
    }
    if (tok.contains("added_tokens") && tok["added_tokens"].is_array()) {
      for (const json& a : tok["added_tokens"]) {
        AddedToken t;
        if (!a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") || !a["content"].is_string())
          throw std::invalid_argument("added_tokens entries need an integer \"id\" and a string \"content\"");
        t.id = a["id"].get<int32_t>();
        if (t.id < 0 || t.id >= (1 << 24)) throw std::invalid_argument("added token id " + std::to_string(t.id) + " out of range");
        t.content = a["content"].get<std::string>();
        if (t.content.empty()) throw std::invalid_argument("added token " + std::to_string(t.id) + " is empty");
        t.special = a.value("special", false);
        t.lstrip = a.value("lstrip", false);
        t.rstrip = a.value("rstrip", false);
        max_id = std::max<int64_t>(max_id, t.id);
        spec.added.push_back(std::move(t));
      }
    }
    if (max_id < 0) throw std::invalid_argument("the vocabulary is empty");
    spec.tokens.assign(size_t(max_id + 1), std::string());
    for (auto& [id, text] : entries) spec.tokens[size_t(id)] = std::move(text);
    for (const AddedToken& a : spec.added) spec.tokens[size_t(a.id)] = a.content;

    if (!model.contains("merges") || !model["merges"].is_array()) throw std::invalid_argument("model.merges must be a list");
    spec.merges.reserve(model["merges"].size());
    for (const json& m : model["merges"]) {
      if (m.is_string()) {  // "a b" (older files)
        const std::string s = m.get<std::string>();
        const size_t space = s.find(' ', 1);
        if (space == std::string::npos) throw std::invalid_argument("merge '" + s + "' is not two tokens");
        spec.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {  // ["a", "b"]
        spec.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
      } else {
        throw std::invalid_argument("a merge must be \"a b\" or [\"a\", \"b\"]");
      }
    }
    spec.byte_fallback = model.value("byte_fallback", false);
    spec.ignore_merges = model.value("ignore_merges", false);
    spec.fuse_unk = model.value("fuse_unk", false);
    if (model.contains("unk_token") && model["unk_token"].is_string()) {
      const std::string unk = model["unk_token"];
      const auto it = std::find(spec.tokens.begin(), spec.tokens.end(), unk);
      if (it != spec.tokens.end()) spec.unk_id = int32_t(it - spec.tokens.begin());
    }
    spec.normalizer = make_normalizer(tok.value("normalizer", json()));
    spec.pre_tokenizer = make_pre_tokenizer(tok.value("pre_tokenizer", json()));
    spec.decoder = make_decoder(tok.value("decoder", json()));
    spec.gguf_pre = gguf_pre_name(tok.value("pre_tokenizer", json()));

    auto id_of = [&](const std::string& content) -> int32_t {
      if (content.empty()) return -1;
      for (const AddedToken& a : spec.added)
        if (a.content == content) return a.id;
      const auto it = std::find(spec.tokens.begin(), spec.tokens.end(), content);
      return it == spec.tokens.end() ? -1 : int32_t(it - spec.tokens.begin());
    };
    spec.bos_id = id_of(special_content(config, "bos_token"));
    spec.eos_id = id_of(special_content(config, "eos_token"));

    // Special tokens around a text: TemplateProcessing's "single" (alone or in a Sequence), unless
    // tokenizer_config.json says add_bos_token / add_eos_token (transformers rebuilds the template then).
    std::vector<const json*> templates;
    if (const json post = tok.value("post_processor", json()); post.is_object()) {
      if (post.value("type", "") == "TemplateProcessing") templates.push_back(&tok["post_processor"]);
      if (post.value("type", "") == "Sequence" && post.contains("processors"))
        for (const json& p : tok["post_processor"]["processors"])
          if (p.value("type", "") == "TemplateProcessing") templates.push_back(&p);
    }
    for (const json* t : templates) {
      bool before = true;
      for (const json& item : t->value("single", json::array())) {
        if (item.contains("Sequence")) {
          before = false;
        } else if (item.contains("SpecialToken")) {
          const std::string name = item["SpecialToken"].value("id", "");
          std::vector<int32_t> ids;
          if (t->contains("special_tokens") && (*t)["special_tokens"].contains(name))
            ids = (*t)["special_tokens"][name].value("ids", std::vector<int32_t>());
          else if (const int32_t id = id_of(name); id >= 0)
            ids = {id};
          auto& dst = before ? spec.prefix_ids : spec.suffix_ids;
          dst.insert(dst.end(), ids.begin(), ids.end());
        }
      }
    }
    if (config.is_object() && config.contains("add_bos_token") && config["add_bos_token"].is_boolean()) {
      spec.prefix_ids.clear();
      if (config["add_bos_token"].get<bool>() && spec.bos_id >= 0) spec.prefix_ids = {spec.bos_id};
    }
    if (config.is_object() && config.contains("add_eos_token") && config["add_eos_token"].is_boolean()) {
      spec.suffix_ids.clear();
      if (config["add_eos_token"].get<bool>() && spec.eos_id >= 0) spec.suffix_ids = {spec.eos_id};
    }
    if (spec.bos_id < 0 && !spec.prefix_ids.empty()) spec.bos_id = spec.prefix_ids.front();
    for (int32_t id : spec.prefix_ids)
      if (id < 0 || size_t(id) >= spec.tokens.size()) throw std::invalid_argument("post_processor names an unknown token");
    for (int32_t id : spec.suffix_ids)
      if (id < 0 || size_t(id) >= spec.tokens.size()) throw std::invalid_argument("post_processor names an unknown token");
  } catch (const json::exception& e) {
    throw_load_error(where, std::string("bad tokenizer.json: ") + e.what());
  } catch (const std::invalid_argument& e) {
    throw_load_error(where, e.what());
  }
  return spec;
}

BpeSpec bpe_spec_from_vocab(const Vocab& v, const std::string& where) {
  BpeSpec spec;
  const size_t n = v.tokens.size();
  if (n == 0) throw_load_error(where, "the vocabulary has no tokens (tokenizer.ggml.tokens)");
  if (!v.types.empty() && v.types.size() != n)
    throw_load_error(where, "tokenizer.ggml.token_type has " + std::to_string(v.types.size()) +
                                " entries but tokenizer.ggml.tokens has " + std::to_string(n));
  if (v.merges.empty()) throw_load_error(where, "a gpt2 vocabulary needs tokenizer.ggml.merges");
  spec.tokens = v.tokens;
  for (size_t i = 0; i < v.merges.size(); ++i) {
    const std::string& m = v.merges[i];
    const size_t space = m.find(' ', 1);
    if (space == std::string::npos)
      throw_load_error(where, "tokenizer.ggml.merges[" + std::to_string(i) + "] = '" + m + "' is not two tokens");
    spec.merges.emplace_back(m.substr(0, space), m.substr(space + 1));
  }
  for (size_t i = 0; i < v.types.size(); ++i)
    if (v.types[i] == kTypeControl || v.types[i] == kTypeUserDefined)
      spec.added.push_back({int32_t(i), v.tokens[i], v.types[i] == kTypeControl, false, false});
  const std::string pre = v.pre.empty() ? "gpt-2" : v.pre == "default" || v.pre == "gpt2" ? "gpt-2"
                          : v.pre == "llama3" || v.pre == "llama-v3" ? "llama-bpe" : v.pre;
  const auto known = std::find_if(known_pres().begin(), known_pres().end(), [&](const KnownPre& k) { return pre == k.name; });
  if (known == known_pres().end()) {
    std::string names;
    for (const KnownPre& k : known_pres()) names += (names.empty() ? "" : ", ") + std::string(k.name);
    throw_load_error(where, "unsupported tokenizer.ggml.pre '" + v.pre + "' (supported: " + names + ")");
  }
  spec.pre_tokenizer = make_pre_tokenizer(known->spec);
  spec.gguf_pre = known->name;
  if (spec.gguf_pre == "qwen2") spec.normalizer = make_normalizer(json{{"type", "NFC"}});  // as Qwen's tokenizer.json
  spec.decoder = make_decoder(json{{"type", "ByteLevel"}});
  spec.ignore_merges = spec.gguf_pre == "llama-bpe";
  auto check_id = [&](const char* name, int32_t id) {
    if (id >= -1 && (id < 0 || size_t(id) < n)) return;
    throw_load_error(where, std::string(name) + " " + std::to_string(id) + " is outside the vocabulary");
  };
  check_id("BOS token id", v.bos_id);
  check_id("EOS token id", v.eos_id);
  spec.bos_id = v.bos_id;
  spec.eos_id = v.eos_id;
  if (v.add_bos && v.bos_id >= 0) spec.prefix_ids = {v.bos_id};
  if (v.add_eos && v.eos_id >= 0) spec.suffix_ids = {v.eos_id};
  return spec;
}

BpeTokenizer::BpeTokenizer(BpeSpec spec) : spec_(std::move(spec)) {
  const size_t n = spec_.tokens.size();
  ids_.reserve(n);
  for (size_t i = 0; i < n; ++i)
    if (!spec_.tokens[i].empty()) ids_.emplace(spec_.tokens[i], int32_t(i));
  // Added tokens win over model entries with the same text.
  for (const AddedToken& a : spec_.added) ids_[a.content] = a.id;
  merges_.reserve(spec_.merges.size());
  for (size_t r = 0; r < spec_.merges.size(); ++r) {
    const auto& [a, b] = spec_.merges[r];
    const int32_t ia = find(a), ib = find(b), ic = find(a + b);
    if (ia < 0 || ib < 0 || ic < 0) continue;  // NOTE: tokenizers refuses such files; a dead merge is harmless
    merges_.emplace(pair_key(ia, ib), Merge{int32_t(r), ic});
  }
  is_special_.assign(n, 0);
  for (const AddedToken& a : spec_.added) is_special_[size_t(a.id)] = a.special;
  byte_ids_.assign(256, -1);
  if (spec_.byte_fallback) {
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      byte_ids_[size_t(b)] = find(name);
    }
  }
  for (const AddedToken& a : spec_.added) added_by_first_byte_[static_cast<unsigned char>(a.content[0])].push_back(&a);
  for (auto& list : added_by_first_byte_)
    std::stable_sort(list.begin(), list.end(),
                     [](const AddedToken* x, const AddedToken* y) { return x->content.size() > y->content.size(); });
}

void BpeTokenizer::pad_vocab(int n) {
  if (n <= int(spec_.tokens.size())) return;
  spec_.tokens.resize(size_t(n));
  is_special_.resize(size_t(n), 1);
}

int32_t BpeTokenizer::find(std::string_view token) const {
  const auto it = ids_.find(std::string(token));
  return it == ids_.end() ? -1 : it->second;
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view raw) const {
  const std::string text = to_valid_utf8(raw);
  std::vector<int32_t> out;
  // Leftmost-longest matches of the added tokens split the text; the rest goes through the pipeline.
  size_t seg_begin = 0, i = 0;
  bool first_segment = true;
  auto flush = [&](size_t end) {
    if (end > seg_begin) encode_segment(text.substr(seg_begin, end - seg_begin), first_segment, out);
    first_segment = false;
  };
  while (i < text.size()) {
    const AddedToken* hit = nullptr;
    for (const AddedToken* a : added_by_first_byte_[static_cast<unsigned char>(text[i])])
      if (text.compare(i, a->content.size(), a->content) == 0) {
        hit = a;
        break;
      }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    size_t seg_end = i;
    if (hit->lstrip)
      while (seg_end > seg_begin && is_whitespace_byte(text[seg_end - 1])) --seg_end;
    flush(seg_end);
    out.push_back(hit->id);
    i += hit->content.size();
    if (hit->rstrip)
      while (i < text.size() && is_whitespace_byte(text[i])) ++i;
    seg_begin = i;
  }
  if (text.size() > seg_begin || first_segment) flush(text.size());
  return out;
}

void BpeTokenizer::encode_segment(std::string text, bool first_segment, std::vector<int32_t>& out) const {
  if (spec_.normalizer) spec_.normalizer->normalize(text);
  if (text.empty()) return;
  std::vector<std::string> pieces{std::move(text)};
  if (spec_.pre_tokenizer) spec_.pre_tokenizer->split(pieces, first_segment);
  for (const std::string& p : pieces) encode_word(p, out);
}

// BPE over one pre-token: start from its characters and apply the best-ranked merge (leftmost on ties)
// until none applies, through a priority queue of candidate pairs; stale candidates are skipped.
void BpeTokenizer::encode_word(const std::string& word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (spec_.ignore_merges)
    if (const int32_t id = find(word); id >= 0) {
      out.push_back(id);
      return;
    }
  struct Symbol {
    int32_t id;         // -1: not in the vocabulary (never merges)
    int32_t prev, next; // neighbours (-1 at the ends)
    uint32_t begin, len; // bytes of `word`
  };
  std::vector<Symbol> sym;
  sym.reserve(word.size());
  for (size_t i = 0; i < word.size();) {
    const size_t len = std::min(word.size() - i, size_t(utf8_char_length(static_cast<unsigned char>(word[i]))));
    const int32_t k = int32_t(sym.size());
    sym.push_back({find(std::string_view(word).substr(i, len)), k - 1, -1, uint32_t(i), uint32_t(len)});
    if (k > 0) sym[size_t(k - 1)].next = k;
    i += len;
  }
  struct Candidate {
    int32_t rank, left, left_id, right_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto consider = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = sym[size_t(left)].next;
    if (right < 0 || sym[size_t(left)].id < 0 || sym[size_t(right)].id < 0) return;
    const auto it = merges_.find(pair_key(sym[size_t(left)].id, sym[size_t(right)].id));
    if (it != merges_.end()) queue.push({it->second.rank, left, sym[size_t(left)].id, sym[size_t(right)].id});
  };
  for (int32_t k = 0; k + 1 < int32_t(sym.size()); ++k) consider(k);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& l = sym[size_t(c.left)];
    if (l.len == 0 || l.id != c.left_id || l.next < 0) continue;
    Symbol& r = sym[size_t(l.next)];
    if (r.id != c.right_id) continue;
    l.id = merges_.at(pair_key(c.left_id, c.right_id)).result;
    l.len += r.len;
    l.next = r.next;
    if (r.next >= 0) sym[size_t(r.next)].prev = c.left;
    r.len = 0;
    r.id = -2;  // dead
    consider(l.prev);
    consider(c.left);
  }
  bool last_unk = false;
  for (int32_t k = 0; k >= 0 && k < int32_t(sym.size()); k = sym[size_t(k)].next) {
    const Symbol& s = sym[size_t(k)];
    if (s.id >= 0) {
      out.push_back(s.id);
      last_unk = false;
      continue;
    }
    const std::string_view bytes = std::string_view(word).substr(s.begin, s.len);
    bool bytes_ok = spec_.byte_fallback;
    for (char b : bytes) bytes_ok = bytes_ok && byte_ids_[static_cast<unsigned char>(b)] >= 0;
    if (bytes_ok) {
      for (char b : bytes) out.push_back(byte_ids_[static_cast<unsigned char>(b)]);
      last_unk = false;
    } else if (spec_.unk_id >= 0) {
      if (!(spec_.fuse_unk && last_unk)) out.push_back(spec_.unk_id);
      last_unk = true;
    }
    // NOTE: without <unk> or byte tokens the character has no id and is dropped, as tokenizers does.
  }
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids, bool continuation) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids)
    if (!is_special_[size_t(id)]) tokens.push_back(spec_.tokens[size_t(id)]);
  DecodeState state{continuation, false};
  if (spec_.decoder) spec_.decoder->decode(tokens, state);
  std::string text;
  for (const std::string& t : tokens) text += t;
  return to_valid_utf8(text);
}

bool BpeTokenizer::past_leading_space(std::span<const int32_t> ids) const {
  for (int32_t id : ids)
    if (!is_special_[size_t(id)]) return true;
  return false;
}

std::string BpeTokenizer::token_bytes(int32_t id) const {
  std::vector<std::string> tokens{spec_.tokens[size_t(id)]};
  DecodeState state{true, false};
  if (spec_.decoder) spec_.decoder->decode(tokens, state);
  std::string text;
  for (const std::string& t : tokens) text += t;
  return text;
}

}  // namespace inflight::engine

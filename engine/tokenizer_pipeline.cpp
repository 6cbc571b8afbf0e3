#include "engine/tokenizer_pipeline.h"

#include <algorithm>
#include <stdexcept>

#include "engine/text_regex.h"
#include "engine/unicode_text.h"

namespace inflight::engine {

using nlohmann::json;

const char* const kGpt2SplitPattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kLlama3SplitPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2SplitPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

namespace {

constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // U+2581

[[noreturn]] void bad(const std::string& what) { throw std::invalid_argument(what); }

std::string type_of(const json& j, const char* stage) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    bad(std::string(stage) + ": an object with a \"type\" is expected, got " + j.dump().substr(0, 80));
  return j["type"].get<std::string>();
}

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  if (from.empty()) return s;
  for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size()) s.replace(pos, from.size(), to);
  return s;
}

// A {"String": s} or {"Regex": r} pattern as a regex.
TextRegex pattern_regex(const json& p, const char* where) {
  if (p.is_object() && p.contains("String") && p["String"].is_string())
    return TextRegex(regex_escape(p["String"].get<std::string>()));
  if (p.is_object() && p.contains("Regex") && p["Regex"].is_string()) return TextRegex(p["Regex"].get<std::string>());
  bad(std::string(where) + ": pattern must be {\"String\": ...} or {\"Regex\": ...}");
}

std::string string_field(const json& j, const char* key, const char* where) {
  if (!j.contains(key) || !j[key].is_string()) bad(std::string(where) + ": \"" + key + "\" must be a string");
  return j[key].get<std::string>();
}

// ------------------------------------------------------------------------------------------------
// Normalizers

struct UnicodeNormalizer : Normalizer {
  NormalForm form;
  explicit UnicodeNormalizer(NormalForm f) : form(f) {}
  void normalize(std::string& text) const override { text = normalize_unicode(text, form); }
};

struct LowercaseNormalizer : Normalizer {
  void normalize(std::string& text) const override { text = lowercase_unicode(text); }
};

struct ReplaceNormalizer : Normalizer {
  TextRegex regex;
  std::string content;
  ReplaceNormalizer(TextRegex r, std::string c) : regex(std::move(r)), content(std::move(c)) {}
  void normalize(std::string& text) const override {
    const auto matches = regex.find_all(text);
    if (matches.empty()) return;
    std::string out;
    size_t at = 0;
    for (auto [b, e] : matches) {
      out.append(text, at, b - at);
      out += content;
      at = e;
    }
    out.append(text, at);
    text = std::move(out);
  }
};

struct PrependNormalizer : Normalizer {
  std::string prefix;
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix);  // tokenizers prepends to non-empty text only
  }
};

struct SequenceNormalizer : Normalizer {
  std::vector<std::unique_ptr<Normalizer>> stages;
  void normalize(std::string& text) const override {
    for (const auto& s : stages) s->normalize(text);
  }
};

// ------------------------------------------------------------------------------------------------
// Pre-tokenizers

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

SplitBehavior parse_behavior(const json& j) {
  const std::string b = j.value("behavior", std::string("Isolated"));
  if (b == "Removed") return SplitBehavior::Removed;
  if (b == "Isolated") return SplitBehavior::Isolated;
  if (b == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (b == "Contiguous") return SplitBehavior::Contiguous;
  bad("Split: unknown behavior '" + b + "'");
}

// Splits `piece` at the matches of `regex` (or at the gaps between them when inverted), as
// tokenizers' NormalizedString::split does.
void split_piece(const std::string& piece, const TextRegex& regex, SplitBehavior behavior, bool invert,
                 std::vector<std::string>& out) {
  // [begin, end, is_match]
  struct Span { size_t begin, end; bool match; };
  std::vector<Span> spans;
  size_t at = 0;
  for (auto [b, e] : regex.find_all(piece)) {
    if (b > at) spans.push_back({at, b, invert});
    spans.push_back({b, e, !invert});
    at = e;
  }
  if (at < piece.size()) spans.push_back({at, piece.size(), invert});

  std::vector<std::string> pieces;
  auto text_of = [&](const Span& s) { return piece.substr(s.begin, s.end - s.begin); };
  if (behavior == SplitBehavior::MergedWithNext) {
    // A match joins the span after it unless that one is a match too (walked from the end).
    bool next_match = false;
    for (auto s = spans.rbegin(); s != spans.rend(); ++s) {
      if (s->match && !next_match && !pieces.empty()) pieces.back().insert(0, text_of(*s));
      else pieces.push_back(text_of(*s));
      next_match = s->match;
    }
    std::reverse(pieces.begin(), pieces.end());
  } else {
    bool prev_match = false;
    for (const Span& s : spans) {
      const bool join = !pieces.empty() && ((behavior == SplitBehavior::Contiguous && s.match && prev_match) ||
                                            (behavior == SplitBehavior::MergedWithPrevious && s.match && !prev_match));
      if (behavior == SplitBehavior::Removed && s.match) {
      } else if (join) {
        pieces.back() += text_of(s);
      } else {
        pieces.push_back(text_of(s));
      }
      prev_match = s.match;
    }
  }
  for (std::string& p : pieces)
    if (!p.empty()) out.push_back(std::move(p));
}

struct SplitPreTokenizer : PreTokenizer {
  TextRegex regex;
  SplitBehavior behavior;
  bool invert;
  SplitPreTokenizer(TextRegex r, SplitBehavior b, bool i) : regex(std::move(r)), behavior(b), invert(i) {}
  void split(std::vector<std::string>& pieces, bool) const override {
    std::vector<std::string> out;
    for (const std::string& p : pieces) split_piece(p, regex, behavior, invert, out);
    pieces = std::move(out);
  }
};

struct ByteLevelPreTokenizer : PreTokenizer {
  bool add_prefix_space = false;
  std::unique_ptr<TextRegex> regex;  // use_regex: GPT-2's split
  void split(std::vector<std::string>& pieces, bool) const override {
    std::vector<std::string> out;
    for (std::string& p : pieces) {
      if (add_prefix_space && !p.starts_with(' ')) p.insert(0, " ");
      if (regex) split_piece(p, *regex, SplitBehavior::Isolated, false, out);
      else out.push_back(std::move(p));
    }
    const ByteLevelAlphabet& a = ByteLevelAlphabet::get();
    for (std::string& p : out) p = a.encode(p);
    pieces = std::move(out);
  }
};

enum class PrependScheme { Always, First, Never };

struct MetaspacePreTokenizer : PreTokenizer {
  std::string replacement{kMetaspace};
  PrependScheme scheme = PrependScheme::Always;
  bool split_words = true;
  void split(std::vector<std::string>& pieces, bool first_segment) const override {
    std::vector<std::string> out;
    for (size_t i = 0; i < pieces.size(); ++i) {
      std::string p = replace_all(pieces[i], " ", replacement);
      const bool prepend = scheme == PrependScheme::Always || (scheme == PrependScheme::First && first_segment && i == 0);
      if (prepend && !p.starts_with(replacement)) p.insert(0, replacement);
      if (!split_words) {
        out.push_back(std::move(p));
        continue;
      }
      // MergedWithNext on the replacement character.
      size_t start = 0;
      for (size_t pos = p.find(replacement, replacement.size()); pos != std::string::npos;
           pos = p.find(replacement, pos + replacement.size())) {
        out.push_back(p.substr(start, pos - start));
        start = pos;
      }
      out.push_back(p.substr(start));
    }
    std::erase_if(out, [](const std::string& s) { return s.empty(); });
    pieces = std::move(out);
  }
};

struct DigitsPreTokenizer : PreTokenizer {
  std::unique_ptr<TextRegex> regex;
  explicit DigitsPreTokenizer(bool individual) : regex(std::make_unique<TextRegex>(individual ? "\\p{N}" : "\\p{N}+")) {}
  void split(std::vector<std::string>& pieces, bool) const override {
    std::vector<std::string> out;
    for (const std::string& p : pieces) split_piece(p, *regex, SplitBehavior::Isolated, false, out);
    pieces = std::move(out);
  }
};

struct WhitespacePreTokenizer : PreTokenizer {
  TextRegex regex{"\\w+|[^\\w\\s]+"};
  void split(std::vector<std::string>& pieces, bool) const override {
    std::vector<std::string> out;
    for (const std::string& p : pieces) split_piece(p, regex, SplitBehavior::Removed, true, out);
    pieces = std::move(out);
  }
};

struct SequencePreTokenizer : PreTokenizer {
  std::vector<std::unique_ptr<PreTokenizer>> stages;
  void split(std::vector<std::string>& pieces, bool first_segment) const override {
    for (const auto& s : stages) s->split(pieces, first_segment);
  }
};

// ------------------------------------------------------------------------------------------------
// Decoders

struct ByteLevelDecoder : Decoder {
  void decode(std::vector<std::string>& tokens, DecodeState&) const override {
    const ByteLevelAlphabet& a = ByteLevelAlphabet::get();
    std::string bytes, all;
    for (const std::string& t : tokens) all += a.decode(t, &bytes) ? bytes : t;  // added tokens keep their text
    tokens.assign(1, std::move(all));
  }
};

struct MetaspaceDecoder : Decoder {
  std::string replacement{kMetaspace};
  PrependScheme scheme = PrependScheme::Always;
  void decode(std::vector<std::string>& tokens, DecodeState& state) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string t = replace_all(tokens[i], replacement, " ");
      if (i == 0 && !state.continuation && scheme != PrependScheme::Never && t.starts_with(' ')) t.erase(0, 1);
      tokens[i] = std::move(t);
    }
  }
};

// <0xAB> tokens become their byte. The bytes stay raw: the tokenizer repairs invalid UTF-8 of the whole
// text at the end (maximal subparts, as TextDecoder does), and an incomplete character at the end of a
// stream waits for its last byte.
struct ByteFallbackDecoder : Decoder {
  static int byte_of(const std::string& t) {
    auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; };
    if (t.size() != 6 || !t.starts_with("<0x") || t[5] != '>') return -1;
    const int hi = hex(t[3]), lo = hex(t[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
  }
  void decode(std::vector<std::string>& tokens, DecodeState&) const override {
    for (std::string& t : tokens)
      if (const int b = byte_of(t); b >= 0) t.assign(1, char(b));
  }
};

struct FuseDecoder : Decoder {
  void decode(std::vector<std::string>& tokens, DecodeState& state) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    tokens.assign(1, std::move(all));
    state.fused = true;
  }
};

struct StripDecoder : Decoder {
  char content = ' ';
  size_t start = 0, stop = 0;
  void decode(std::vector<std::string>& tokens, DecodeState& state) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& t = tokens[i];
      const bool text_start_elsewhere = i == 0 && state.continuation && state.fused;
      size_t cut = 0;
      if (!text_start_elsewhere)
        while (cut < start && cut < t.size() && t[cut] == content) ++cut;
      t.erase(0, cut);
      size_t tail = 0;
      while (tail < stop && tail < t.size() && t[t.size() - 1 - tail] == content) ++tail;
      t.resize(t.size() - tail);
    }
  }
};

struct ReplaceDecoder : Decoder {
  std::string from, to;
  void decode(std::vector<std::string>& tokens, DecodeState&) const override {
    for (std::string& t : tokens) t = replace_all(t, from, to);
  }
};

struct SequenceDecoder : Decoder {
  std::vector<std::unique_ptr<Decoder>> stages;
  void decode(std::vector<std::string>& tokens, DecodeState& state) const override {
    for (const auto& s : stages) s->decode(tokens, state);
  }
};

PrependScheme parse_prepend_scheme(const json& j, const char* where) {
  if (j.contains("prepend_scheme") && j["prepend_scheme"].is_string()) {
    const std::string s = j["prepend_scheme"];
    if (s == "always") return PrependScheme::Always;
    if (s == "first") return PrependScheme::First;
    if (s == "never") return PrependScheme::Never;
    bad(std::string(where) + ": unknown prepend_scheme '" + s + "'");
  }
  return j.value("add_prefix_space", true) ? PrependScheme::Always : PrependScheme::Never;
}

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const json& j) {
  if (j.is_null()) return nullptr;
  const std::string type = type_of(j, "normalizer");
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(NormalForm::NFC);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(NormalForm::NFD);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(NormalForm::NFKC);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(NormalForm::NFKD);
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "Replace") {
    if (!j.contains("pattern")) bad("normalizer Replace: missing \"pattern\"");
    return std::make_unique<ReplaceNormalizer>(pattern_regex(j["pattern"], "normalizer Replace"),
                                               string_field(j, "content", "normalizer Replace"));
  }
  if (type == "Prepend") {
    auto n = std::make_unique<PrependNormalizer>();
    n->prefix = string_field(j, "prepend", "normalizer Prepend");
    return n;
  }
  if (type == "Sequence") {
    auto n = std::make_unique<SequenceNormalizer>();
    if (!j.contains("normalizers") || !j["normalizers"].is_array()) bad("normalizer Sequence: \"normalizers\" must be a list");
    for (const json& s : j["normalizers"])
      if (auto stage = make_normalizer(s)) n->stages.push_back(std::move(stage));
    return n;
  }
  bad("unsupported normalizer type '" + type + "' (supported: NFC, NFD, NFKC, NFKD, Lowercase, Replace, Prepend, Sequence)");
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json& j) {
  if (j.is_null()) return nullptr;
  const std::string type = type_of(j, "pre_tokenizer");
  if (type == "ByteLevel") {
    auto p = std::make_unique<ByteLevelPreTokenizer>();
    p->add_prefix_space = j.value("add_prefix_space", false);
    if (j.value("use_regex", true)) p->regex = std::make_unique<TextRegex>(kGpt2SplitPattern);
    return p;
  }
  if (type == "Split") {
    if (!j.contains("pattern")) bad("pre_tokenizer Split: missing \"pattern\"");
    return std::make_unique<SplitPreTokenizer>(pattern_regex(j["pattern"], "pre_tokenizer Split"), parse_behavior(j),
                                               j.value("invert", false));
  }
  if (type == "Metaspace") {
    auto p = std::make_unique<MetaspacePreTokenizer>();
    p->replacement = j.value("replacement", std::string(kMetaspace));
    p->scheme = parse_prepend_scheme(j, "pre_tokenizer Metaspace");
    p->split_words = j.value("split", true);
    return p;
  }
  if (type == "Digits") return std::make_unique<DigitsPreTokenizer>(j.value("individual_digits", false));
  if (type == "Whitespace") return std::make_unique<WhitespacePreTokenizer>();
  if (type == "Sequence") {
    auto p = std::make_unique<SequencePreTokenizer>();
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array())
      bad("pre_tokenizer Sequence: \"pretokenizers\" must be a list");
    for (const json& s : j["pretokenizers"])
      if (auto stage = make_pre_tokenizer(s)) p->stages.push_back(std::move(stage));
    return p;
  }
  bad("unsupported pre_tokenizer type '" + type + "' (supported: ByteLevel, Split, Metaspace, Digits, Whitespace, Sequence)");
}

std::unique_ptr<Decoder> make_decoder(const json& j) {
  if (j.is_null()) return nullptr;
  const std::string type = type_of(j, "decoder");
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Metaspace") {
    auto d = std::make_unique<MetaspaceDecoder>();
    d->replacement = j.value("replacement", std::string(kMetaspace));
    d->scheme = parse_prepend_scheme(j, "decoder Metaspace");
    return d;
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    auto d = std::make_unique<StripDecoder>();
    const std::string c = string_field(j, "content", "decoder Strip");
    if (c.size() != 1) bad("decoder Strip: content must be one ASCII character");
    d->content = c[0];
    d->start = j.value("start", size_t(0));
    d->stop = j.value("stop", size_t(0));
    return d;
  }
  if (type == "Replace") {
    auto d = std::make_unique<ReplaceDecoder>();
    if (!j.contains("pattern") || !j["pattern"].is_object() || !j["pattern"].contains("String"))
      bad("decoder Replace: only {\"String\": ...} patterns are supported");
    d->from = j["pattern"]["String"].get<std::string>();
    d->to = string_field(j, "content", "decoder Replace");
    return d;
  }
  if (type == "Sequence") {
    auto d = std::make_unique<SequenceDecoder>();
    if (!j.contains("decoders") || !j["decoders"].is_array()) bad("decoder Sequence: \"decoders\" must be a list");
    for (const json& s : j["decoders"])
      if (auto stage = make_decoder(s)) d->stages.push_back(std::move(stage));
    return d;
  }
  bad("unsupported decoder type '" + type + "' (supported: ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, Sequence)");
}

}  // namespace inflight::engine

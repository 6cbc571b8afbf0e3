#include "engine/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "engine/load_error.h"
#include "engine/tokenizer_bpe.h"
#include "engine/tokenizer_sentencepiece.h"

namespace inflight::engine {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD, what a dangling byte decodes to

bool ends_with_incomplete_utf8(std::string_view s) { return s.ends_with(kReplacement); }

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_load_error(path, "cannot open");
  std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw_load_error(path, "not valid JSON");
  if (!j.is_object()) throw_load_error(path, "not a JSON object");
  return j;
}

}  // namespace

Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_file(const std::string& path) {
  auto sp = SentencePieceTokenizer::from_file(path);
  Tokenizer t;
  t.bos_id_ = sp->bos_id();
  t.eos_id_ = sp->eos_id();
  if (t.bos_id_ >= 0) t.prefix_ids_ = {t.bos_id_};
  t.backend_ = std::move(sp);
  return t;
}

Tokenizer Tokenizer::from_vocab(const Vocab& vocab, const std::string& where) {
  Tokenizer t;
  if (vocab.model == "gpt2") {
    BpeSpec spec = bpe_spec_from_vocab(vocab, where);
    t.prefix_ids_ = spec.prefix_ids;
    t.suffix_ids_ = spec.suffix_ids;
    t.backend_ = std::make_unique<BpeTokenizer>(std::move(spec));
    t.kind_ = "bpe";
    t.add_special_ = !t.prefix_ids_.empty();  // BOS first; callers pass add_bos() as add_special
  } else {
    t.backend_ = SentencePieceTokenizer::from_vocab(vocab, where);
    t.add_special_ = vocab.add_bos;
    if (vocab.bos_id >= 0) t.prefix_ids_ = {vocab.bos_id};
  }
  t.bos_id_ = vocab.bos_id;
  t.eos_id_ = vocab.eos_id;
  return t;
}

Tokenizer Tokenizer::from_tokenizer_json(const std::string& path, const std::string& config_path) {
  const nlohmann::json tok = read_json(path);
  std::error_code ec;
  const nlohmann::json config =
      !config_path.empty() && std::filesystem::exists(config_path, ec) ? read_json(config_path) : nlohmann::json();
  BpeSpec spec = bpe_spec_from_json(tok, config, path);
  Tokenizer t;
  t.prefix_ids_ = spec.prefix_ids;
  t.suffix_ids_ = spec.suffix_ids;
  t.bos_id_ = spec.bos_id;
  t.eos_id_ = spec.eos_id;
  t.add_special_ = !t.prefix_ids_.empty();  // BOS first; callers pass add_bos() as add_special
  t.backend_ = std::make_unique<BpeTokenizer>(std::move(spec));
  t.kind_ = "bpe";
  return t;
}

const BpeTokenizer* Tokenizer::bpe() const { return dynamic_cast<const BpeTokenizer*>(backend_.get()); }

void Tokenizer::pad_vocab(int model_vocab_size) {
  if (auto* bpe = dynamic_cast<BpeTokenizer*>(backend_.get())) bpe->pad_vocab(model_vocab_size);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special) const {
  std::vector<int32_t> ids = backend_->encode(text);
  if (!add_special) return ids;
  std::vector<int32_t> out;
  out.reserve(ids.size() + prefix_ids_.size() + suffix_ids_.size());
  out.insert(out.end(), prefix_ids_.begin(), prefix_ids_.end());
  out.insert(out.end(), ids.begin(), ids.end());
  out.insert(out.end(), suffix_ids_.begin(), suffix_ids_.end());
  return out;
}

void Tokenizer::check_ids(std::span<const int32_t> ids) const {
  const int n = vocab_size();
  for (int32_t id : ids)
    if (id < 0 || id >= n)
      throw std::invalid_argument("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                  std::to_string(n) + ")");
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  check_ids(ids);
  return backend_->decode(ids, false);
}

std::string Tokenizer::piece(int32_t id) const {
  check_ids(std::span<const int32_t>(&id, 1));
  return backend_->piece(id);
}

std::string Tokenizer::token_bytes(int32_t id) const {
  check_ids(std::span<const int32_t>(&id, 1));
  return backend_->token_bytes(id);
}

int Tokenizer::vocab_size() const { return backend_->vocab_size(); }

std::string Tokenizer::decode_continuation(std::span<const int32_t> ids) const {
  check_ids(ids);
  return backend_->decode(ids, true);
}

bool Tokenizer::past_leading_space(std::span<const int32_t> ids) const { return backend_->past_leading_space(ids); }

// Invariant: the text emitted so far is decode(ids_[0, read_offset_)) minus decode(prompt), and
// read_offset_ never splits a UTF-8 character spread over byte tokens.
IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, std::span<const int32_t> prompt_ids)
    : tokenizer_(&tokenizer), ids_(prompt_ids.begin(), prompt_ids.end()), read_offset_(prompt_ids.size()) {
  // The window starts inside the prompt: a prompt may end inside a UTF-8 character, which decode(prompt)
  // already shows as U+FFFD and which a generated byte then turns into an invalid sequence or a whole
  // character. Decoded with that context, the deltas never repeat what decode(prompt) showed. The window
  // holds the prompt's last 4 tokens that give text (a 4-byte character's 3 leading bytes and one more),
  // and the tokens between them that give none (control tokens, <unk>), which bytes are joined across.
  size_t start = ids_.size();
  for (int with_text = 0; start > 0 && with_text < 4; --start)
    if (!tokenizer.decode_continuation(std::span<const int32_t>(&ids_[start - 1], 1)).empty()) ++with_text;
  prefix_offset_ = start;
  continuation_ = tokenizer.past_leading_space(std::span<const int32_t>(ids_.data(), prefix_offset_));
}

// The text ids_[begin, end) adds to decode(ids_[0, begin)).
std::string IncrementalDetokenizer::window_text(size_t begin, size_t end) const {
  std::span<const int32_t> window(ids_.data() + begin, end - begin);
  // Before the strip (only control tokens or a stripped space so far) a window starts a fresh decode.
  return continuation_ ? tokenizer_->decode_continuation(window) : tokenizer_->decode(window);
}

std::string IncrementalDetokenizer::push(int32_t id) {
  ids_.push_back(id);
  const std::string prefix_text = window_text(prefix_offset_, read_offset_);
  const std::string new_text = window_text(prefix_offset_, ids_.size());
  if (new_text.size() <= prefix_text.size() || ends_with_incomplete_utf8(new_text)) return {};
  std::string delta = new_text.substr(prefix_text.size());
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  if (!continuation_)
    continuation_ = tokenizer_->past_leading_space(std::span<const int32_t>(ids_.data(), prefix_offset_));
  return delta;
}

std::string IncrementalDetokenizer::flush() {
  const std::string prefix_text = window_text(prefix_offset_, read_offset_);
  const std::string new_text = window_text(prefix_offset_, ids_.size());
  prefix_offset_ = read_offset_ = ids_.size();
  continuation_ = continuation_ || tokenizer_->past_leading_space(ids_);
  return new_text.size() > prefix_text.size() ? new_text.substr(prefix_text.size()) : std::string();
}

}  // namespace inflight::engine

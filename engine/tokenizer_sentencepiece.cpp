#include "engine/tokenizer_sentencepiece.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <unordered_map>

#include "engine/load_error.h"
#include "engine/tokenizer.h"

namespace inflight::engine {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, sentencepiece's escaped space

// sentencepiece ModelProto.SentencePiece.Type; GGUF's tokenizer.ggml.token_type uses the same numbers.
enum PieceType : int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

// Protobuf wire format (proto2), just what ModelProto needs. Field numbers are those of
// sentencepiece_model.proto; checked against the bytes of a real tokenizer.model and by loading the
// result (tests/engine/test_tokenizer.cpp).
class ProtoWriter {
 public:
  void varint(int field, int64_t v) {  // int32/enum/bool; negative int32 is sign-extended to 10 bytes
    tag(field, 0);
    raw_varint(uint64_t(v));
  }
  void fixed32(int field, float v) {
    tag(field, 5);
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    for (int i = 0; i < 4; ++i) out_.push_back(char((bits >> (8 * i)) & 0xFF));
  }
  void bytes(int field, std::string_view v) {
    tag(field, 2);
    raw_varint(v.size());
    out_.append(v);
  }
  const std::string& str() const { return out_; }

 private:
  void tag(int field, int wire_type) { raw_varint(uint64_t(field) << 3 | uint64_t(wire_type)); }
  void raw_varint(uint64_t v) {
    for (; v >= 0x80; v >>= 7) out_.push_back(char((v & 0x7F) | 0x80));
    out_.push_back(char(v));
  }
  std::string out_;
};

namespace field {
constexpr int kModelPieces = 1, kModelTrainerSpec = 2, kModelNormalizerSpec = 3;
constexpr int kPiecePiece = 1, kPieceScore = 2, kPieceType = 3;
constexpr int kTrainerModelType = 3, kTrainerVocabSize = 4, kTrainerByteFallback = 35, kTrainerUnkId = 40,
              kTrainerBosId = 41, kTrainerEosId = 42, kTrainerPadId = 43, kTrainerUnkPiece = 45,
              kTrainerBosPiece = 46, kTrainerEosPiece = 47, kTrainerPadPiece = 48;
constexpr int kNormName = 1, kNormCharsMap = 2, kNormAddDummyPrefix = 3, kNormRemoveExtraWhitespaces = 4,
              kNormEscapeWhitespaces = 5;
constexpr int kModelTypeBpe = 2;
}  // namespace field

bool is_byte_piece(std::string_view p) {
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'); };
  return p.size() == 6 && p.substr(0, 3) == "<0x" && hex(p[3]) && hex(p[4]) && p[5] == '>';
}

std::vector<int32_t> infer_types(const Vocab& v) {
  const int32_t n = int32_t(v.tokens.size());
  std::vector<int32_t> types(v.tokens.size(), kNormal);
  for (int32_t i = 0; i < n; ++i) {
    const std::string& t = v.tokens[i];
    if (is_byte_piece(t)) types[i] = kByte;
    else if (t == "<unk>") types[i] = kUnknown;
    else if (t == "<s>" || t == "</s>") types[i] = kControl;
  }
  for (int32_t id : {v.bos_id, v.eos_id, v.pad_id})
    if (id >= 0 && id < n) types[id] = kControl;
  if (v.unk_id >= 0 && v.unk_id < n) types[v.unk_id] = kUnknown;
  return types;
}

// The vocabulary as a serialized sentencepiece ModelProto, or LoadError naming `where`.
//
// Model type: llama.cpp tokenizes a "llama" vocabulary by repeatedly merging the adjacent pair whose
// merged piece has the highest score, which is what sentencepiece's BPE model does with these scores
// (Llama 1/2's own tokenizer.model is BPE too). Unigram would run Viterbi over the scores instead.
// Normalizer: identity with remove_extra_whitespaces off, because llama.cpp (like llama2.c's run.c)
// keeps spaces literally; "a  b" must keep both spaces.
std::string build_model_proto(const Vocab& v, const std::string& where) {
  if (v.model != "llama")
    throw_load_error(where, "unsupported tokenizer model '" + v.model +
                                "' (only 'llama', a sentencepiece vocabulary, is supported)");
  const size_t n = v.tokens.size();
  if (n == 0) throw_load_error(where, "the vocabulary has no tokens (tokenizer.ggml.tokens)");
  if (n > size_t(INT32_MAX)) throw_load_error(where, "the vocabulary is too large");
  if (!v.scores.empty() && v.scores.size() != n)
    throw_load_error(where, "tokenizer.ggml.scores has " + std::to_string(v.scores.size()) +
                                " entries but tokenizer.ggml.tokens has " + std::to_string(n));
  if (!v.types.empty() && v.types.size() != n)
    throw_load_error(where, "tokenizer.ggml.token_type has " + std::to_string(v.types.size()) +
                                " entries but tokenizer.ggml.tokens has " + std::to_string(n));
  auto check_id = [&](const char* name, int32_t id, bool optional) {
    if ((optional && id == -1) || (id >= 0 && size_t(id) < n)) return;
    throw_load_error(where, std::string(name) + " " + std::to_string(id) + " is outside the vocabulary [0, " +
                                std::to_string(n) + ")");
  };
  check_id("unknown token id", v.unk_id, false);
  check_id("BOS token id", v.bos_id, true);
  check_id("EOS token id", v.eos_id, true);
  check_id("padding token id", v.pad_id, true);
  if (v.add_bos && v.bos_id < 0) throw_load_error(where, "add_bos_token is set but there is no BOS token");

  std::vector<int32_t> types = v.types.empty() ? infer_types(v) : v.types;
  bool has_unknown = false, has_bytes = false;
  std::unordered_map<std::string_view, size_t> seen;
  seen.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string& t = v.tokens[i];
    if (t.empty()) throw_load_error(where, "token " + std::to_string(i) + " is an empty piece");
    if (auto [it, fresh] = seen.emplace(t, i); !fresh)
      throw_load_error(where, "duplicate piece '" + t + "' (ids " + std::to_string(it->second) + " and " +
                                  std::to_string(i) + ")");
    if (types[i] < kNormal || types[i] > kByte)
      throw_load_error(where, "token " + std::to_string(i) + " has unknown token type " +
                                  std::to_string(types[i]));
    has_unknown |= types[i] == kUnknown;
    has_bytes |= types[i] == kByte;
  }
  // sentencepiece finds <unk> by its type; some converters mark it normal.
  if (!has_unknown) types[v.unk_id] = kUnknown;

  ProtoWriter model;
  for (size_t i = 0; i < n; ++i) {
    ProtoWriter p;
    p.bytes(field::kPiecePiece, v.tokens[i]);
    p.fixed32(field::kPieceScore, v.scores.empty() ? 0.0f : v.scores[i]);
    p.varint(field::kPieceType, types[i]);
    model.bytes(field::kModelPieces, p.str());
  }
  ProtoWriter trainer;
  trainer.varint(field::kTrainerModelType, field::kModelTypeBpe);
  trainer.varint(field::kTrainerVocabSize, int64_t(n));
  // sentencepiece insists on all 256 <0xXX> pieces when this is on and on none when it is off.
  trainer.varint(field::kTrainerByteFallback, has_bytes);
  trainer.varint(field::kTrainerUnkId, v.unk_id);
  trainer.varint(field::kTrainerBosId, v.bos_id);
  trainer.varint(field::kTrainerEosId, v.eos_id);
  trainer.varint(field::kTrainerPadId, v.pad_id);
  // The *_piece fields, not the *_id ones, are what SentencePieceProcessor::bos_id() etc. look up.
  trainer.bytes(field::kTrainerUnkPiece, v.tokens[v.unk_id]);
  if (v.bos_id >= 0) trainer.bytes(field::kTrainerBosPiece, v.tokens[v.bos_id]);
  if (v.eos_id >= 0) trainer.bytes(field::kTrainerEosPiece, v.tokens[v.eos_id]);
  if (v.pad_id >= 0) trainer.bytes(field::kTrainerPadPiece, v.tokens[v.pad_id]);
  model.bytes(field::kModelTrainerSpec, trainer.str());
  ProtoWriter norm;
  norm.bytes(field::kNormName, "identity");
  norm.bytes(field::kNormCharsMap, "");
  norm.varint(field::kNormAddDummyPrefix, v.add_space_prefix);
  norm.varint(field::kNormRemoveExtraWhitespaces, false);
  norm.varint(field::kNormEscapeWhitespaces, true);
  model.bytes(field::kModelNormalizerSpec, norm.str());
  return model.str();
}

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size())
    s.replace(pos, from.size(), to);
  return s;
}

}  // namespace

SentencePieceTokenizer::SentencePieceTokenizer(std::unique_ptr<sentencepiece::SentencePieceProcessor> sp)
    : sp_(std::move(sp)) {
  // The anchor must survive the leading-space strip with text left over, so that whatever follows it
  // decodes as a continuation: a normal piece of a space and at least one non-space character.
  const int n = sp_->GetPieceSize();
  for (int id = 0; id < n && anchor_id_ < 0; ++id) {
    if (sp_->IsControl(id) || sp_->IsUnknown(id) || sp_->IsUnused(id) || sp_->IsByte(id)) continue;
    const std::string& p = sp_->IdToPiece(id);
    if (p.size() > kSpace.size() && p.starts_with(kSpace) && !p.substr(kSpace.size()).starts_with(kSpace))
      anchor_id_ = id;
  }
  if (anchor_id_ >= 0) {
    anchor_text_ = plain_decode(std::span<const int32_t>(&anchor_id_, 1));
    anchor_literal_ = replace_all(sp_->IdToPiece(anchor_id_), kSpace, " ");
  }
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::unique_ptr<SentencePieceTokenizer> SentencePieceTokenizer::from_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw_load_error(path, "no such tokenizer file");
  if (!std::filesystem::is_regular_file(path, ec)) throw_load_error(path, "not a regular file");
  auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
  if (auto st = sp->Load(path); !st.ok())
    throw_load_error(path, "not a sentencepiece tokenizer model: " + st.ToString());
  return std::unique_ptr<SentencePieceTokenizer>(new SentencePieceTokenizer(std::move(sp)));
}

std::unique_ptr<SentencePieceTokenizer> SentencePieceTokenizer::from_vocab(const Vocab& vocab, const std::string& where) {
  const std::string proto = build_model_proto(vocab, where);
  auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
  if (auto st = sp->LoadFromSerializedProto(proto); !st.ok())
    throw_load_error(where, "sentencepiece rejects the vocabulary: " + st.ToString());
  return std::unique_ptr<SentencePieceTokenizer>(new SentencePieceTokenizer(std::move(sp)));
}

std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view text) const {
  std::vector<int> ids;
  if (auto st = sp_->Encode(text, &ids); !st.ok())
    throw std::runtime_error("sentencepiece encode failed: " + st.ToString());
  return std::vector<int32_t>(ids.begin(), ids.end());
}

std::string SentencePieceTokenizer::plain_decode(std::span<const int32_t> ids) const {
  std::string text;
  if (auto st = sp_->Decode(std::vector<int>(ids.begin(), ids.end()), &text); !st.ok())
    throw std::runtime_error("sentencepiece decode failed: " + st.ToString());
  return text;
}

std::string SentencePieceTokenizer::decode(std::span<const int32_t> ids, bool continuation) const {
  if (!continuation || anchor_id_ < 0) return plain_decode(ids);  // no anchor: no piece carries a leading space
  std::vector<int32_t> anchored;
  anchored.reserve(ids.size() + 1);
  anchored.push_back(anchor_id_);
  anchored.insert(anchored.end(), ids.begin(), ids.end());
  std::string text = plain_decode(anchored);
  return text.substr(std::min(anchor_text_.size(), text.size()));
}

bool SentencePieceTokenizer::past_leading_space(std::span<const int32_t> ids) const {
  if (anchor_id_ < 0) return true;
  std::vector<int32_t> probe(ids.begin(), ids.end());
  probe.push_back(anchor_id_);
  return plain_decode(probe) == plain_decode(ids) + anchor_literal_;
}

std::string SentencePieceTokenizer::piece(int32_t id) const { return sp_->IdToPiece(id); }

std::string SentencePieceTokenizer::token_bytes(int32_t id) const {
  const std::string p = sp_->IdToPiece(id);
  if (sp_->IsByte(id) || is_byte_piece(p)) return std::string(1, char(std::stoi(p.substr(3, 2), nullptr, 16)));
  return replace_all(p, kSpace, " ");
}

int SentencePieceTokenizer::vocab_size() const { return sp_->GetPieceSize(); }
int32_t SentencePieceTokenizer::bos_id() const { return sp_->bos_id(); }
int32_t SentencePieceTokenizer::eos_id() const { return sp_->eos_id(); }

}  // namespace inflight::engine

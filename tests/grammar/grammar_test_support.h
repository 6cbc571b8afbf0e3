// Shared by the grammar tests: a JSON grammar in GBNF, vocabularies (stories260K's sentencepiece one and a
// synthetic byte-level one), the brute-force mask, and random walks through a grammar.
#pragma once
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/grammar/grammar.h"
#include "engine/grammar/matcher.h"
#include "engine/model_loader.h"
#include "test_support.h"

namespace inflight::test {

using engine::grammar::Matcher;
using engine::grammar::TokenVocab;

// JSON (RFC 8259) in GBNF, written for these tests.
inline const char* json_gbnf() {
  return R"(# A JSON document with optional surrounding whitespace.
root    ::= ws value ws
value   ::= object | array | string | number | "true" | "false" | "null"
object  ::= "{" ws ( member ( ws "," ws member )* ws )? "}"
member  ::= string ws ":" ws value
array   ::= "[" ws ( value ( ws "," ws value )* ws )? "]"
string  ::= "\"" char* "\""
char    ::= [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" hex{4} )
hex     ::= [0-9a-fA-F]
number  ::= "-"? integer fraction? exponent?
integer ::= "0" | [1-9] [0-9]*
fraction ::= "." [0-9]+
exponent ::= [eE] [-+]? [0-9]+
ws      ::= [ \t\n\r]*
)";
}

// The 256 single bytes: accept_bytes then decides exactly the grammar's language.
inline std::shared_ptr<const TokenVocab> single_bytes() {
  static const auto vocab = [] {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.emplace_back(1, char(b));
    return std::make_shared<const TokenVocab>(std::move(tokens), -1);
  }();
  return vocab;
}

// stories260K's vocabulary (sentencepiece, 512 tokens, byte fallback).
inline std::shared_ptr<const TokenVocab> stories_vocab() {
  static const std::shared_ptr<const TokenVocab> vocab = [] {
    const engine::Tokenizer tokenizer = engine::load_tokenizer(stories_gguf());
    return std::make_shared<const TokenVocab>(tokenizer);
  }();
  return vocab;
}

// A byte-level vocabulary: ids 0..255 the single bytes, then `num_words` random strings (English-like words with
// and without a leading space, digits, JSON punctuation, multi-byte characters and fragments of them), then an
// empty special token and EOS (the last id).
inline std::shared_ptr<const TokenVocab> byte_level_vocab(int num_words, uint32_t seed) {
  std::mt19937 rng(seed);
  const std::vector<std::string> pieces = {
      "a", "b", "c", "e", "t", "th", "he", "in", "er", "an", "re", "on", "at", "st", "nd", "x", "q", "z", "E", "T",
      "0", "1", "7", "9", "-", ".", ",", ":", "\"", "{", "}", "[", "]", "\\", "\\n", "\\u", " ", "  ", "\n", "\t",
      "true", "false", "null", "\xC3\xA9", "\xCE\xB2", "\xE2\x82\xAC", "\xF0\x9F\x98\x80", "\xC3", "\xA9",
      "\xE2\x82", "\x82\xAC", "\xF0\x9F", "\":", "\",", "{\"", "\"}", "[\"", "e+", "E-"};
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, char(b));
  std::uniform_int_distribution<size_t> pick(0, pieces.size() - 1);
  std::uniform_int_distribution<int> parts(1, 4);
  for (int i = 0; i < num_words; ++i) {
    std::string t = (rng() % 3 == 0) ? " " : "";
    for (int p = parts(rng); p > 0; --p) t += pieces[pick(rng)];
    tokens.push_back(t);
  }
  tokens.emplace_back();  // a special token (no bytes)
  tokens.emplace_back("</s>");
  const auto eos = int32_t(tokens.size() - 1);
  return std::make_shared<const TokenVocab>(std::move(tokens), eos);
}

inline std::vector<uint32_t> mask_of(const Matcher& m, bool cached = true) {
  std::vector<uint32_t> mask((size_t(m.vocab().size()) + 31) / 32, 0xDEADBEEF);
  if (cached) m.fill_mask(mask);
  else m.fill_mask_uncached(mask);
  return mask;
}

// Every token tried with accept_token on a copy of the matcher.
inline std::vector<uint32_t> brute_force_mask(const Matcher& m) {
  std::vector<uint32_t> mask((size_t(m.vocab().size()) + 31) / 32, 0);
  for (int32_t id = 0; id < m.vocab().size(); ++id) {
    Matcher copy = m;
    if (copy.accept_token(id)) mask[size_t(id) / 32] |= 1u << (id % 32);
  }
  return mask;
}

inline std::vector<int32_t> allowed_ids(const std::vector<uint32_t>& mask) {
  std::vector<int32_t> ids;
  for (size_t w = 0; w < mask.size(); ++w)
    for (int b = 0; b < 32; ++b)
      if ((mask[w] >> b) & 1) ids.push_back(int32_t(w * 32 + size_t(b)));
  return ids;
}

// Accepts a random allowed non-EOS token (EOS once in a while when allowed); false when none is allowed.
inline bool step_randomly(Matcher& m, std::mt19937& rng) {
  const std::vector<int32_t> ids = allowed_ids(mask_of(m));
  std::vector<int32_t> text_ids;
  for (int32_t id : ids)
    if (id != m.vocab().eos_id()) text_ids.push_back(id);
  if (text_ids.empty()) return false;
  return m.accept_token(text_ids[rng() % text_ids.size()]);
}

}  // namespace inflight::test

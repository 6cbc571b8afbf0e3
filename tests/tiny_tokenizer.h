// Small real tokenizer.json files written by the tests: a byte-level BPE vocabulary in Qwen 2's style (NFC,
// Qwen 2's split pattern, ByteLevel, ChatML special tokens and template) and a sentencepiece-style one in
// Llama 2's style (Prepend + Replace normalizers, byte fallback, Replace / ByteFallback / Fuse / Strip
// decoders). Merges build a few whole words, so BPE has real work to do.
#pragma once
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/tokenizer.h"

namespace inflight::test {

// GPT-2's byte-level alphabet: the code point standing for byte b.
inline std::string byte_level_char(int b) {
  static const std::vector<std::string> table = [] {
    std::vector<std::string> t(256);
    int next = 256;
    for (int x = 0; x < 256; ++x) {
      const bool printable = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255);
      const unsigned cp = printable ? unsigned(x) : unsigned(next++);
      std::string s;
      if (cp < 0x80) s += char(cp);
      else s += char(0xC0 | (cp >> 6)), s += char(0x80 | (cp & 0x3F));
      t[size_t(x)] = s;
    }
    return t;
  }();
  return table[size_t(b)];
}
inline std::string byte_level(const std::string& text) {
  std::string out;
  for (unsigned char c : text) out += byte_level_char(c);
  return out;
}

// The words the tiny vocabularies can build, each by merging left to right.
inline const std::vector<std::string>& tiny_words() {
  static const std::vector<std::string> words = {" the", " and", "Hello", " world", "Once", " upon", " a", " time",
                                                 " there", " was", " little", " girl", "ing"};
  return words;
}

// Writes tokenizer.json + tokenizer_config.json of the byte-level vocabulary into `dir`; returns its vocab size.
// Ids: 0..255 the bytes, then merged pieces, then <|endoftext|>, <|im_start|>, <|im_end|> (special) and
// <tool_call> (added, not special).
inline int write_tiny_byte_level_tokenizer(const std::filesystem::path& dir) {
  using nlohmann::json;
  std::filesystem::create_directories(dir);
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level_char(b)] = b;
  json merges = json::array();
  int next = 256;
  for (const std::string& w : tiny_words()) {
    std::string left = byte_level(w.substr(0, 1));
    for (size_t i = 1; i < w.size(); ++i) {
      const std::string right = byte_level(w.substr(i, 1));
      if (!vocab.contains(left + right)) {
        merges.push_back({left, right});
        vocab[left + right] = next++;
      }
      left += right;
    }
  }
  json added = json::array();
  for (const char* t : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"})
    added.push_back({{"id", next++}, {"content", t}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                     {"normalized", false}, {"special", true}});
  added.push_back({{"id", next++}, {"content", "<tool_call>"}, {"single_word", false}, {"lstrip", false},
                   {"rstrip", false}, {"normalized", false}, {"special", false}});
  const std::string qwen2 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  const json tok = {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", qwen2}}}, {"behavior", "Isolated"}, {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}}}}},
      {"post_processor", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", ""},
        {"end_of_word_suffix", ""}, {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
        {"vocab", vocab}, {"merges", merges}}}};
  const std::string chatml =
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
      "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
  const json config = {{"add_bos_token", false},   {"add_prefix_space", false}, {"bos_token", nullptr},
                       {"eos_token", "<|im_end|>"}, {"pad_token", "<|endoftext|>"}, {"chat_template", chatml},
                       {"model_max_length", 4096},  {"tokenizer_class", "Qwen2Tokenizer"}};
  std::ofstream(dir / "tokenizer.json") << tok.dump(1);
  std::ofstream(dir / "tokenizer_config.json") << config.dump(1);
  return next;
}

// The sentencepiece-style vocabulary (Llama 2's tokenizer.json shape): <unk>, <s>, </s>, <0x00>..<0xFF>,
// "▁", the lowercase letters, then merged pieces of "▁" + the tiny words (spaces as "▁").
inline int write_tiny_metaspace_tokenizer(const std::filesystem::path& dir) {
  using nlohmann::json;
  std::filesystem::create_directories(dir);
  const std::string space = "\xE2\x96\x81";
  json vocab = json::object();
  int next = 0;
  for (const char* t : {"<unk>", "<s>", "</s>"}) vocab[t] = next++;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = next++;
  }
  vocab[space] = next++;
  for (char c = 'a'; c <= 'z'; ++c) vocab[std::string(1, c)] = next++;
  json merges = json::array();
  for (const std::string& w : tiny_words()) {
    if (w[0] != ' ') continue;
    std::string left = space;
    for (size_t i = 1; i < w.size(); ++i) {
      const std::string right = w.substr(i, 1);
      if (!vocab.contains(left + right)) {
        merges.push_back(left + " " + right);  // the older "a b" form
        vocab[left + right] = next++;
      }
      left += right;
    }
  }
  json added = json::array();
  for (int id = 0; id < 3; ++id) {
    const char* t = id == 0 ? "<unk>" : id == 1 ? "<s>" : "</s>";
    added.push_back({{"id", id}, {"content", t}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                     {"normalized", false}, {"special", true}});
  }
  const json tok = {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers", {{{"type", "Prepend"}, {"prepend", space}},
                         {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", space}}}}}},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders", {{{"type", "Replace"}, {"pattern", {{"String", space}}}, {"content", " "}},
                      {{"type", "ByteFallback"}},
                      {{"type", "Fuse"}},
                      {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", "<unk>"}, {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr}, {"fuse_unk", true}, {"byte_fallback", true}, {"vocab", vocab},
        {"merges", merges}}}};
  const json config = {{"add_bos_token", true}, {"add_eos_token", false}, {"bos_token", "<s>"}, {"eos_token", "</s>"},
                       {"unk_token", "<unk>"}, {"legacy", true}, {"tokenizer_class", "LlamaTokenizer"}};
  std::ofstream(dir / "tokenizer.json") << tok.dump(1);
  std::ofstream(dir / "tokenizer_config.json") << config.dump(1);
  return next;
}

// The vocabulary `write` writes (write_tiny_byte_level_tokenizer or write_tiny_metaspace_tokenizer), loaded
// through a fresh folder under /tmp that is removed afterwards (for the fuzz targets, which have no TempDir).
template <typename Write>
engine::Tokenizer load_tiny_tokenizer(Write write) {
  char dir[] = "/tmp/inflight-tiny-tokenizer-XXXXXX";
  if (!mkdtemp(dir)) std::abort();
  write(std::filesystem::path(dir));
  engine::Tokenizer tok = engine::Tokenizer::from_tokenizer_json(std::string(dir) + "/tokenizer.json",
                                                                 std::string(dir) + "/tokenizer_config.json");
  std::filesystem::remove_all(dir);
  return tok;
}

}  // namespace inflight::test

// BPE tokenizers from tokenizer.json (byte-level in Qwen 2's style, sentencepiece-style in Llama 2's) and
// from GGUF gpt2 vocabularies: merges, normalizers, pre-tokenizers, decoders, added tokens, special tokens
// around a text, streaming detokenization, the make-model exports, and clear errors for bad files.
// (tests/tokenizers checks the real Llama 3, Qwen 3, Gemma 3 and Llama 2 tokenizers against transformers.js.)
#include <doctest/doctest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/builtin_model.h"
#include "engine/load_error.h"
#include "engine/model_loader.h"
#include "engine/tokenizer.h"
#include "test_support.h"
#include "tiny_tokenizer.h"

using namespace inflight;
using engine::Tokenizer;
using nlohmann::json;

namespace {

json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

Tokenizer load(const test::TempDir& dir) {
  return Tokenizer::from_tokenizer_json(dir / "tokenizer.json", dir / "tokenizer_config.json");
}

std::string stream_text(const Tokenizer& t, const std::vector<int32_t>& prompt, const std::vector<int32_t>& generated) {
  engine::IncrementalDetokenizer detok(t, prompt);
  std::string text;
  for (int32_t id : generated) text += detok.push(id);
  return text + detok.flush();
}

const std::vector<std::string> kSamples = {
    "", "Hello world", "Once upon a time, there was a little girl.", "  spaces\n\n\ttabs  ", "12345 and 678",
    "日本語のテキスト", "emoji 😀👨‍👩‍👧 ok", "e\u0301 é", "don't STOP", "<|im_start|>user\nHello<|im_end|>\n",
    "<tool_call>{\"a\": 1}</tool_call>", "<|im_start|", "x<|endoftext|>y"};

}  // namespace

TEST_SUITE("tokenizer_bpe") {
  TEST_CASE("byte-level BPE (Qwen 2 style): merges, byte fallback to single bytes, added tokens, round trip") {
    test::TempDir dir("bpe");
    const int n = test::write_tiny_byte_level_tokenizer(dir.path);
    const json vocab = read_json(dir.path / "tokenizer.json")["model"]["vocab"];
    auto id = [&](const char* piece) { return vocab.at(piece).get<int32_t>(); };
    const Tokenizer t = load(dir);
    CHECK(std::string(t.kind()) == "bpe");
    CHECK(t.vocab_size() == n);
    CHECK(t.eos_id() == n - 2);  // <|im_end|>
    CHECK(t.bos_id() == -1);
    CHECK_FALSE(t.add_bos());
    CHECK(t.encode("Hello world", true) == std::vector<int32_t>{id("Hello"), id("Ġworld")});
    CHECK(t.encode("Once upon a time, there", false) ==
          std::vector<int32_t>{id("Once"), id("Ġupon"), id("Ġa"), id("Ġtime"), ',', id("Ġthere")});
    // Qwen 2's pattern splits digits one by one and keeps "'t" apart.
    CHECK(t.encode("12", false) == std::vector<int32_t>{'1', '2'});
    CHECK(t.encode("don't", false) == std::vector<int32_t>{'d', 'o', 'n', '\'', 't'});
    // Added tokens are split out first; special ones decode to nothing, the others to their text.
    const int32_t im_start = n - 3, im_end = n - 2, tool_call = n - 1;
    CHECK(t.encode("<|im_start|>user\nHello<|im_end|>", false) ==
          std::vector<int32_t>{im_start, 'u', 's', 'e', 'r', id("Ċ"), id("Hello"), im_end});
    CHECK(t.decode(t.encode("<|im_start|>user\nHello<|im_end|>", false)) == "user\nHello");
    CHECK(t.decode(t.encode("<tool_call>x", false)) == "<tool_call>x");
    CHECK(t.encode("<tool_call>", false) == std::vector<int32_t>{tool_call});
    CHECK(t.piece(id("Ġworld")) == "Ġworld");
    CHECK(t.token_bytes(id("Ġworld")) == " world");
    CHECK(t.token_bytes(0xC3) == "\xC3");
    // NFC: a decomposed é comes back composed.
    CHECK(t.decode(t.encode("e\u0301", false)) == "\u00e9");
    for (const std::string& s : kSamples) {
      CAPTURE(s);
      const std::string nfc_only = s == "e\u0301 é" ? "\u00e9 é" : s;
      std::string want = nfc_only;
      for (const char* special : {"<|im_start|>", "<|im_end|>", "<|endoftext|>"})
        for (size_t p; (p = want.find(special)) != std::string::npos;) want.erase(p, std::strlen(special));
      CHECK(t.decode(t.encode(s, true)) == want);
    }
    CHECK_THROWS_AS(t.decode(std::vector<int32_t>{n}), std::invalid_argument);
  }

  TEST_CASE("byte-level BPE streams UTF-8 whole: a character split over byte tokens comes out once complete") {
    test::TempDir dir("bpe");
    test::write_tiny_byte_level_tokenizer(dir.path);
    const Tokenizer t = load(dir);
    const std::vector<int32_t> ids = t.encode("Hello 😀 world 日本", false);
    engine::IncrementalDetokenizer detok(t, {});
    std::vector<std::string> deltas;
    for (int32_t id : ids) deltas.push_back(detok.push(id));
    std::string all;
    for (const std::string& d : deltas) {
      all += d;
      CHECK(d.find("\xEF\xBF\xBD") == std::string::npos);  // never a partial character
    }
    CHECK(all + detok.flush() == "Hello 😀 world 日本");
    CHECK(stream_text(t, t.encode("Once upon", false), t.encode(" a time", false)) == " a time");
  }

  TEST_CASE("a prompt ending inside a UTF-8 character: the stream does not repeat the U+FFFD decode(prompt) shows") {
    // Found by fuzzing (tests/fuzz/corpus/bpe/regression-prompt-partial-utf8): the prompt ends with the byte
    // token <0xE4> (the lead byte of a 3-byte character), generation goes on with <0x94> and '#'. decode(prompt)
    // shows the dangling byte as U+FFFD; decode(all) shows <0xE4><0x94> as one U+FFFD (a maximal subpart),
    // so the stream must add only "#" and what follows, not a second U+FFFD.
    test::TempDir dir("bpe");
    test::write_tiny_metaspace_tokenizer(dir.path);
    const json vocab = read_json(dir.path / "tokenizer.json")["model"]["vocab"];
    auto id = [&](const char* piece) { return vocab.at(piece).get<int32_t>(); };
    const Tokenizer t = load(dir);
    const std::vector<int32_t> prompt = {id("<0xFD>"), id("<0xE4>")};
    const std::vector<int32_t> generated = {id("<0x94>"), id("<0x23>"), id("<0xE7>"), id("<0xBF>"), id("u")};
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), generated.begin(), generated.end());
    const std::string prompt_text = t.decode(prompt), whole = t.decode(all);
    REQUIRE(whole.starts_with(prompt_text));
    CHECK(stream_text(t, prompt, generated) == whole.substr(prompt_text.size()));
    // The same with tokens that give no text (BOS, <unk>) between the lead byte and the generation: bytes
    // are joined across them (regression-prompt-partial-utf8-unk).
    std::vector<int32_t> prompt2 = {id("<0xF2>"), id("<s>")};
    prompt2.insert(prompt2.end(), 13, id("<unk>"));
    const std::vector<int32_t> generated2 = {id("<0xB8>"), id("<0x18>"), id("m"), id("<0xD3>")};
    std::vector<int32_t> all2 = prompt2;
    all2.insert(all2.end(), generated2.begin(), generated2.end());
    REQUIRE(t.decode(all2).starts_with(t.decode(prompt2)));
    CHECK(stream_text(t, prompt2, generated2) == t.decode(all2).substr(t.decode(prompt2).size()));
    // A prompt that ends with a character's first bytes and a generation that completes it: the held-back
    // bytes are never streamed as U+FFFD.
    const std::vector<int32_t> abc = t.encode("abc", false);
    std::vector<int32_t> p2 = abc;
    p2.push_back(id("<0xE6>"));
    const std::string s2 = stream_text(t, p2, {id("<0x97>"), id("<0xA5>"), id("a")});
    CHECK(s2.find("\xEF\xBF\xBD") == std::string::npos);
  }

  TEST_CASE("sentencepiece-style BPE (Llama 2 style): Prepend/Replace, byte fallback, BOS, leading space") {
    test::TempDir dir("bpe");
    const int n = test::write_tiny_metaspace_tokenizer(dir.path);
    const json vocab = read_json(dir.path / "tokenizer.json")["model"]["vocab"];
    auto id = [&](const char* piece) { return vocab.at(piece).get<int32_t>(); };
    const Tokenizer t = load(dir);
    CHECK(t.vocab_size() == n);
    CHECK(t.bos_id() == 1);
    CHECK(t.eos_id() == 2);
    CHECK(t.add_bos());
    CHECK(t.encode("the little girl", true) == std::vector<int32_t>{1, id("▁the"), id("▁little"), id("▁girl")});
    // "H" is not in the vocabulary: its byte token.
    CHECK(t.encode("Hello", false) ==
          std::vector<int32_t>{id("▁"), id("<0x48>"), id("e"), id("l"), id("l"), id("o")});
    CHECK(t.decode(t.encode("Hello the world", true)) == "Hello the world");
    CHECK(t.decode(t.encode("é ü", true)) == "é ü");
    CHECK(t.token_bytes(id("▁the")) == " the");
    CHECK(t.token_bytes(id("<0x0A>")) == "\n");
    // Streaming after BOS: the first word's space is dropped once, as in a whole decode.
    const std::vector<int32_t> gen = t.encode("the little é", false);
    std::vector<int32_t> all{1};
    all.insert(all.end(), gen.begin(), gen.end());
    CHECK(stream_text(t, {1}, gen) == t.decode(all));
    CHECK(stream_text(t, {1}, gen) == "the little é");
    // Past the start, a piece keeps its space: "▁the" after "a girl" streams " the".
    CHECK(stream_text(t, t.encode("a girl", true), t.encode("the", false)) == " the");
  }

  TEST_CASE("Metaspace pre-tokenizer (prepend_scheme first) and decoder, Digits, NFKC, Lowercase") {
    test::TempDir dir("bpe");
    test::write_tiny_metaspace_tokenizer(dir.path);
    json tok = read_json(dir.path / "tokenizer.json");
    const json vocab = tok["model"]["vocab"];
    auto id = [&](const char* piece) { return vocab.at(piece).get<int32_t>(); };
    tok["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFKC"}}, {{"type", "Lowercase"}}}}};
    tok["pre_tokenizer"] = {{"type", "Sequence"},
                            {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}},
                                               {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "first"},
                                                {"split", true}}}}};
    tok["decoder"] = {{"type", "Sequence"},
                      {"decoders", {{{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "first"}},
                                    {{"type", "ByteFallback"}},
                                    {{"type", "Fuse"}}}}};
    std::ofstream(dir.path / "tokenizer.json") << tok.dump();
    const Tokenizer t = load(dir);
    // "The 42 girl": lowercased; digits alone (and, not in the vocabulary, as bytes); "▁" joins the next word.
    CHECK(t.encode("The 42 girl", false) ==
          std::vector<int32_t>{id("▁the"), id("▁"), id("<0x34>"), id("<0x32>"), id("▁girl")});
    CHECK(t.decode(t.encode("The 42 girl", true)) == "the 42 girl");
    // NFKC folds the ligature; after a special token the prefix is not prepended ("first").
    CHECK(t.encode("\uFB01", false) == std::vector<int32_t>{id("▁"), id("f"), id("i")});
    CHECK(t.encode("<s>the", false) == std::vector<int32_t>{1, id("t"), id("h"), id("e")});
    CHECK(stream_text(t, {1}, t.encode("the girl", false)) == "the girl");
  }

  TEST_CASE("make-model exports: GGUF gpt2 vocabulary and Hugging Face folder give the tokenizer.json ids") {
    test::TempDir dir("bpe");
    const int n = test::write_tiny_byte_level_tokenizer(dir.path / "tok");
    const Tokenizer t = engine::load_tokenizer((dir.path / "tok").string());
    engine::ModelShape shape = *engine::find_preset("tiny");
    shape.num_layers = 1;
    shape.vocab_size = n;
    const std::string chatml = read_json(dir.path / "tok" / "tokenizer_config.json")["chat_template"];
    const engine::RealVocab real{&t, chatml};
    engine::write_random_model(dir / "m.gguf", shape, kernels::DType::F32, 1, &real);
    engine::write_random_model_hf(dir / "hf", shape, kernels::DType::F16, 1, t, (dir.path / "tok").string());
    const engine::LoadedModel gguf = engine::load_model(dir / "m.gguf");
    const engine::LoadedModel hf = engine::load_model(dir / "hf");
    CHECK(gguf.chat_template == chatml);
    CHECK(hf.chat_template == chatml);
    CHECK(gguf.weights.config.vocab_size == n);
    CHECK(hf.weights.config.vocab_size == n);
    CHECK(gguf.tokenizer.eos_id() == t.eos_id());
    CHECK(hf.tokenizer.eos_id() == t.eos_id());
    CHECK(gguf.weights.config.eos_id == t.eos_id());
    for (const std::string& s : kSamples) {
      CAPTURE(s);
      const auto ids = t.encode(s, true);
      CHECK(gguf.tokenizer.encode(s, true) == ids);
      CHECK(hf.tokenizer.encode(s, true) == ids);
      CHECK(gguf.tokenizer.decode(ids) == t.decode(ids));
    }
    // A padded embedding (more rows than tokens): the extra ids are valid and decode to nothing.
    shape.vocab_size = n + 8;
    engine::write_random_model_hf(dir / "hf-padded", shape, kernels::DType::BF16, 1, t, (dir.path / "tok").string());
    const engine::LoadedModel padded = engine::load_model(dir / "hf-padded");
    CHECK(padded.tokenizer.vocab_size() == n + 8);
    CHECK(padded.tokenizer.decode(std::vector<int32_t>{n + 7, 'a'}) == "a");
    shape.vocab_size = n;
    // The Llama 2 style vocabulary has no GGUF pre-tokenizer name: a clear refusal, not a wrong file.
    test::write_tiny_metaspace_tokenizer(dir.path / "sp");
    const Tokenizer sp = engine::load_tokenizer((dir.path / "sp").string());
    const engine::RealVocab sp_vocab{&sp, ""};
    CHECK_THROWS_WITH_AS(engine::write_random_model(dir / "sp.gguf", shape, kernels::DType::F32, 1, &sp_vocab),
                         doctest::Contains("--format hf"), std::invalid_argument);
  }

  TEST_CASE("bad tokenizer.json files are LoadErrors naming the file and the problem") {
    test::TempDir dir("bpe");
    test::write_tiny_byte_level_tokenizer(dir.path);
    const json good = read_json(dir.path / "tokenizer.json");
    auto error_with = [&](const std::function<void(json&)>& edit) {
      json j = good;
      edit(j);
      std::ofstream(dir.path / "tokenizer.json") << j.dump();
      try {
        load(dir);
      } catch (const engine::LoadError& e) {
        return std::string(e.what());
      }
      return std::string("(loaded)");
    };
    const std::string path = dir / "tokenizer.json";
    std::string e = error_with([](json& j) { j["model"]["type"] = "WordPiece"; });
    CHECK(e.find(path) != std::string::npos);
    CHECK(e.find("WordPiece") != std::string::npos);
    CHECK(error_with([](json& j) { j["model"]["merges"] = json::array({"nospace"}); }).find("nospace") != std::string::npos);
    CHECK(error_with([](json& j) { j["pre_tokenizer"] = {{"type", "BertPreTokenizer"}}; }).find("BertPreTokenizer") !=
          std::string::npos);
    CHECK(error_with([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed"; })
              .find("(unclosed") != std::string::npos);
    CHECK(error_with([](json& j) { j["normalizer"] = {{"type", "Precompiled"}}; }).find("Precompiled") != std::string::npos);
    CHECK(error_with([](json& j) { j["model"]["vocab"]["x"] = "seven"; }).find("vocab") != std::string::npos);
    std::ofstream(dir.path / "tokenizer.json") << "{\"model\": ";
    CHECK_THROWS_WITH_AS(load(dir), doctest::Contains(path.c_str()), engine::LoadError);
  }
}

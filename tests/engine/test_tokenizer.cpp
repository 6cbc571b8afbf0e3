// Tokenizer from tokenizer.model and from a GGUF vocabulary, against run.c's golden ids
// (tests/data/golden/stories260K_greedy.json, or the file named by INFLIGHT_STORIES_GOLDEN), and the
// incremental detokenizer's delta invariant.
#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "engine/gguf.h"
#include "engine/load_error.h"
#include "engine/tokenizer.h"
#include "engine_support.h"
#include "test_support.h"

using namespace inflight;
using engine::IncrementalDetokenizer;
using engine::LoadError;
using engine::Tokenizer;
using engine::Vocab;

namespace {

std::string tok512_model() { return (test::stories_dir() / "tok512.model").string(); }

Vocab vocab_from_gguf(const std::string& path) {
  const engine::GgufFile g = engine::GgufFile::open(path);
  Vocab v;
  v.model = g.get_string("tokenizer.ggml.model").value_or("llama");
  v.tokens = g.get_string_array("tokenizer.ggml.tokens");
  for (double s : g.get_float_array("tokenizer.ggml.scores")) v.scores.push_back(float(s));
  for (int64_t t : g.get_int_array("tokenizer.ggml.token_type")) v.types.push_back(int32_t(t));
  v.unk_id = int32_t(g.get_int("tokenizer.ggml.unknown_token_id").value_or(0));
  v.bos_id = int32_t(g.get_int("tokenizer.ggml.bos_token_id").value_or(1));
  v.eos_id = int32_t(g.get_int("tokenizer.ggml.eos_token_id").value_or(2));
  v.pad_id = int32_t(g.get_int("tokenizer.ggml.padding_token_id").value_or(-1));
  v.add_bos = g.get_bool("tokenizer.ggml.add_bos_token").value_or(true);
  v.add_space_prefix = g.get_bool("tokenizer.ggml.add_space_prefix").value_or(true);
  return v;
}

const Tokenizer& model_tokenizer() {
  static const Tokenizer t = Tokenizer::from_file(tok512_model());
  return t;
}
const Tokenizer& gguf_tokenizer() {
  static const Tokenizer t = Tokenizer::from_vocab(vocab_from_gguf(test::stories_gguf()), test::stories_gguf());
  return t;
}

std::vector<int32_t> ids_of(const nlohmann::json& a) { return a.get<std::vector<int32_t>>(); }

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = uint8_t(s[i]);
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k)
      if ((uint8_t(s[i + k]) & 0xC0) != 0x80) return false;
    i += len;
  }
  return true;
}

size_t count_of(std::string_view haystack, std::string_view needle) {
  size_t n = 0;
  for (size_t pos = haystack.find(needle); pos != std::string_view::npos; pos = haystack.find(needle, pos + 1)) ++n;
  return n;
}

struct Streamed {
  std::vector<std::string> deltas;  // one per push, then the flush
  std::string text;
};
Streamed stream(const Tokenizer& t, const std::vector<int32_t>& prompt, const std::vector<int32_t>& generated) {
  IncrementalDetokenizer d(t, prompt);
  Streamed s;
  for (int32_t id : generated) s.deltas.push_back(d.push(id));
  s.deltas.push_back(d.flush());
  for (const std::string& x : s.deltas) s.text += x;
  return s;
}

// decode(prompt + generated) minus decode(prompt): what the deltas must add up to.
std::string expected_delta_text(const Tokenizer& t, const std::vector<int32_t>& prompt,
                                const std::vector<int32_t>& generated) {
  const std::string before = t.decode(prompt);
  const std::string after = t.decode(concat(prompt, generated));
  REQUIRE(after.starts_with(before));
  return after.substr(before.size());
}

template <class F>
std::string load_error_of(F&& f) {
  try {
    f();
  } catch (const LoadError& e) {
    return e.what();
  }
  FAIL("no LoadError thrown");
  return {};
}

// Strings without leading, trailing or repeated spaces, where tok512.model's whitespace normalisation
// and run.c's literal spaces agree.
const std::vector<std::string> kVariedText = {
    "Once upon a time",
    "héllo wörld 123",
    "The cat sat on the mat. It was 42 degrees!",
    "Zürich, 東京 and 中文 text",
    "emoji 🙂🎉 and more: 👍🏽",
    "line one\nline two\n\nline four",
    "tabs\tand\ttabs",
    "\"quotes\", (parens), [brackets] {braces} <angle> & ampersand; semi-colon",
    "numbers 0 1 2 3 4 5 6 7 8 9 10 100 3.14159",
    "ÀÉÎÕÜ ñ ç ß ø å æ œ",
    "Здравствуй мир",
    "مرحبا",
    "a",
    "Lily and Tom went to the park",
};

}  // namespace

TEST_SUITE("tokenizer") {
  TEST_CASE("tok512.model encodes every golden prompt to run.c's prompt_token_ids") {
    const nlohmann::json golden = test::load_stories_golden();
    const Tokenizer& t = model_tokenizer();
    CHECK(t.vocab_size() == 512);
    CHECK(t.bos_id() == 1);
    CHECK(t.eos_id() == 2);
    REQUIRE(golden["cases"].size() == 4);
    for (const auto& c : golden["cases"]) {
      const std::string prompt = c["prompt"];
      CAPTURE(prompt);
      CHECK(t.encode(prompt, true) == ids_of(c["prompt_token_ids"]));
      const auto all = concat(ids_of(c["prompt_token_ids"]), ids_of(c["generated_token_ids"]));
      CHECK(t.decode(all) == c["sentencepiece_decode_of_prompt_plus_generated"].get<std::string>());
    }
  }

  TEST_CASE("the GGUF vocabulary encodes every golden prompt like run.c") {
    const nlohmann::json golden = test::load_stories_golden();
    const Tokenizer& t = gguf_tokenizer();
    CHECK(t.vocab_size() == 512);
    CHECK(t.bos_id() == 1);
    CHECK(t.eos_id() == 2);
    CHECK(t.add_bos());
    for (const auto& c : golden["cases"]) {
      const std::string prompt = c["prompt"];
      CAPTURE(prompt);
      CHECK(t.encode(prompt, true) == ids_of(c["prompt_token_ids"]));
    }
  }

  TEST_CASE("the GGUF vocabulary gives tok512.model's ids and pieces on text without extra spaces") {
    const Tokenizer& a = model_tokenizer();
    const Tokenizer& b = gguf_tokenizer();
    for (int id = 0; id < a.vocab_size(); ++id) REQUIRE(a.piece(id) == b.piece(id));
    CHECK(b.piece(403) == "\xE2\x96\x81Once");
    CHECK(b.piece(13) == "<0x0A>");
    for (const std::string& s : kVariedText) {
      CAPTURE(s);
      CHECK(a.encode(s, true) == b.encode(s, true));
      CHECK(a.encode(s, false) == b.encode(s, false));
    }
    // From the golden file's semantics block: ö is not a piece and falls back to bytes 0xC3 0xB6.
    CHECK(b.encode("héllo wörld 123", true) ==
          std::vector<int32_t>{1, 270, 485, 306, 414, 263, 198, 185, 420, 341, 410, 475, 479, 472});
  }

  TEST_CASE("the GGUF vocabulary keeps spaces literally, as run.c does; tok512.model collapses them") {
    const Tokenizer& a = model_tokenizer();
    const Tokenizer& b = gguf_tokenizer();
    CHECK(b.encode("a  b", true) == std::vector<int32_t>{1, 261, 410, 268});
    CHECK(b.encode(" The cat", true) == std::vector<int32_t>{1, 410, 291, 280, 294});
    CHECK(b.encode("The cat ", true) == std::vector<int32_t>{1, 291, 280, 294, 410});
    CHECK(a.encode("a  b", true) == std::vector<int32_t>{1, 261, 268});
    CHECK(a.encode(" The cat", true) == std::vector<int32_t>{1, 291, 280, 294});
    CHECK(b.encode("", true) == std::vector<int32_t>{1});
    CHECK(b.encode("", false).empty());
  }

  TEST_CASE("decode round trips and drops control tokens") {
    for (const Tokenizer* t : {&model_tokenizer(), &gguf_tokenizer()}) {
      for (const std::string& s : kVariedText) {
        CAPTURE(s);
        CHECK(t->decode(t->encode(s, true)) == s);
        CHECK(t->decode(t->encode(s, false)) == s);
      }
      CHECK(t->decode(std::vector<int32_t>{1, 403, 2}) == "Once");
      CHECK(t->decode(std::vector<int32_t>{}).empty());
      CHECK_THROWS_AS(t->decode(std::vector<int32_t>{1, 512}), std::invalid_argument);
      CHECK_THROWS_AS(t->piece(-1), std::invalid_argument);
    }
    const Tokenizer& b = gguf_tokenizer();
    for (const std::string s : {"a  b", " leading", "trailing ", "  two  spaces  "}) {
      CAPTURE(s);
      CHECK(b.decode(b.encode(s, true)) == s);  // only the dummy prefix's space is stripped
    }
  }

  TEST_CASE("a vocabulary without token types gets them inferred") {
    Vocab v = vocab_from_gguf(test::stories_gguf());
    v.types.clear();
    const Tokenizer t = Tokenizer::from_vocab(v, "no-types");
    for (const std::string& s : kVariedText) CHECK(t.encode(s, true) == gguf_tokenizer().encode(s, true));
    CHECK(t.decode(std::vector<int32_t>{1, 403, 2}) == "Once");
  }

  TEST_CASE("add_space_prefix false encodes without the dummy prefix") {
    Vocab v = vocab_from_gguf(test::stories_gguf());
    v.add_space_prefix = false;
    const Tokenizer t = Tokenizer::from_vocab(v, "no-prefix");
    const std::vector<int32_t> ids = t.encode("Once", false);
    REQUIRE(!ids.empty());
    CHECK(t.piece(ids[0]) != "\xE2\x96\x81Once");
    CHECK(t.decode(ids) == "Once");
    CHECK(t.decode(gguf_tokenizer().encode("Once", false)) == " Once");  // nothing strips the space now
  }

  TEST_CASE("incremental detokenizer reproduces the golden texts") {
    const nlohmann::json golden = test::load_stories_golden();
    for (const Tokenizer* t : {&model_tokenizer(), &gguf_tokenizer()}) {
      for (const auto& c : golden["cases"]) {
        const std::string prompt = c["prompt"];
        CAPTURE(prompt);
        const auto prompt_ids = ids_of(c["prompt_token_ids"]);
        const auto gen = ids_of(c["generated_token_ids"]);
        const Streamed s = stream(*t, prompt_ids, gen);
        const std::string full = c["sentencepiece_decode_of_prompt_plus_generated"];
        const std::string before = t->decode(prompt_ids);
        REQUIRE(full.starts_with(before));
        CHECK(s.text == full.substr(before.size()));
        if (prompt.empty()) CHECK(s.text == c["generated_text"].get<std::string>());
        CHECK(s.deltas.back().empty());
      }
      for (const auto& r : golden["long_greedy_runs"]["runs"]) {
        const auto prompt_ids = ids_of(r["prompt_token_ids"]);
        const auto gen = ids_of(r["generated_token_ids"]);
        CHECK(stream(*t, prompt_ids, gen).text == expected_delta_text(*t, prompt_ids, gen));
      }
    }
  }

  TEST_CASE("incremental detokenizer emits multi-byte characters once, whole") {
    const std::string text = "Café é, Köln ö, 中文 and 🙂! done";
    for (const Tokenizer* t : {&model_tokenizer(), &gguf_tokenizer()}) {
      const std::vector<int32_t> ids = t->encode(text, true);
      const std::vector<int32_t> prompt(ids.begin(), ids.begin() + 1);
      const std::vector<int32_t> gen(ids.begin() + 1, ids.end());
      int num_byte_tokens = 0;
      for (int32_t id : gen) num_byte_tokens += t->piece(id).starts_with("<0x");
      CHECK(num_byte_tokens >= 10);  // 中, 文 and 🙂 at least are spelled in bytes
      const Streamed s = stream(*t, prompt, gen);
      CHECK(s.text == text);
      CHECK(s.text == t->decode(ids));
      for (const std::string& d : s.deltas) {
        CAPTURE(d);
        CHECK(valid_utf8(d));
        CHECK(d.find("\xEF\xBF\xBD") == std::string::npos);
      }
      for (std::string_view ch : {"é", "ö", "中", "文", "🙂"}) {
        size_t n = 0;
        for (const std::string& d : s.deltas) n += count_of(d, ch);
        CHECK(n == count_of(text, ch));
      }
    }
  }

  TEST_CASE("incremental detokenizer keeps leading spaces right after control tokens and spaces") {
    const Tokenizer& a = model_tokenizer();
    const Tokenizer& b = gguf_tokenizer();
    // 410 is "▁", 403 "▁Once", 407 "▁upon", 35 "<0x20>"; 1 BOS, 2 EOS.
    const std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> cases = {
        {{1}, {403, 407}},           {{}, {403, 407}},           {{1}, {410, 403, 407}},
        {{1}, {410, 410, 403}},      {{1}, {2, 403, 407}},       {{1, 403}, {2, 407, 1, 407}},
        {{1, 403}, {2, 2, 410, 407}}, {{1, 410}, {403}},          {{1}, {35, 403}},
        {{1, 2}, {410, 2, 403, 407}}, {{1, 403, 2}, {1, 403}},    {{410}, {410, 407}},
    };
    for (const Tokenizer* t : {&a, &b}) {
      for (const auto& [prompt, gen] : cases) {
        CAPTURE(prompt);
        CAPTURE(gen);
        CHECK(stream(*t, prompt, gen).text == expected_delta_text(*t, prompt, gen));
      }
    }
  }

  TEST_CASE("incremental detokenizer matches decode on random token streams") {
    std::mt19937 rng(1234);
    // Biased towards what breaks streaming: control tokens, lone spaces, UTF-8 lead and continuation
    // bytes, <unk>.
    auto draw = [&]() -> int32_t {
      switch (rng() % 8) {
        case 0: return int32_t(rng() % 3);                            // <unk> <s> </s>
        case 1: return 410;                                           // ▁
        case 2: return 3 + 0x80 + int32_t(rng() % 0x40);              // continuation byte
        case 3: return 3 + 0xC2 + int32_t(rng() % 0x33);              // lead byte
        case 4: return 3 + 0x20 + int32_t(rng() % 0x60);              // ASCII byte
        default: return 259 + int32_t(rng() % 253);                   // merged / single-character piece
      }
    };
    for (const Tokenizer* t : {&model_tokenizer(), &gguf_tokenizer()}) {
      for (int trial = 0; trial < 400; ++trial) {
        std::vector<int32_t> prompt, gen;
        for (int i = int(rng() % 4); i > 0; --i) prompt.push_back(draw());
        if (!prompt.empty() && t->piece(prompt.back()).starts_with("<0x")) prompt.push_back(259);
        for (int i = 1 + int(rng() % 24); i > 0; --i) gen.push_back(draw());
        CAPTURE(prompt);
        CAPTURE(gen);
        const Streamed s = stream(*t, prompt, gen);
        REQUIRE(s.text == expected_delta_text(*t, prompt, gen));
      }
    }
  }

  TEST_CASE("from_file: a missing or corrupt file is a LoadError naming it") {
    CHECK(load_error_of([] { Tokenizer::from_file("/nonexistent/tokenizer.model"); })
              .find("/nonexistent/tokenizer.model") != std::string::npos);
    test::TempDir dir("tokenizer");
    const std::string garbage = dir / "tokenizer.model";
    test::write_bytes(garbage, {0xDE, 0xAD, 0xBE, 0xEF, 0x00, 0xFF, 0x12, 0x34, 0x56});
    CHECK(load_error_of([&] { Tokenizer::from_file(garbage); }).find(garbage) != std::string::npos);
    const std::string empty = dir / "empty.model";
    test::write_bytes(empty, {});
    CHECK(load_error_of([&] { Tokenizer::from_file(empty); }).find(empty) != std::string::npos);
    CHECK(load_error_of([&] { Tokenizer::from_file(dir.path.string()); }).find(dir.path.string()) !=
          std::string::npos);
  }

  TEST_CASE("from_vocab: a bad vocabulary is a LoadError naming the source and the problem") {
    const Vocab good = vocab_from_gguf(test::stories_gguf());
    auto error_of = [](const Vocab& v) {
      const std::string msg = load_error_of([&] { Tokenizer::from_vocab(v, "model.gguf"); });
      CHECK(msg.starts_with("model.gguf: "));
      return msg;
    };
    Vocab v = good;
    v.tokens[300] = v.tokens[301];
    CHECK(error_of(v).find("duplicate piece '" + good.tokens[301] + "'") != std::string::npos);
    v = good;
    v.scores.pop_back();
    CHECK(error_of(v).find("scores has 511 entries") != std::string::npos);
    v = good;
    v.types.push_back(1);
    CHECK(error_of(v).find("token_type has 513 entries") != std::string::npos);
    v = good;
    v.model = "bert";
    CHECK(error_of(v).find("unsupported tokenizer model 'bert'") != std::string::npos);
    v.model = "gpt2";  // BPE: needs merges
    CHECK(error_of(v).find("tokenizer.ggml.merges") != std::string::npos);
    v = good;
    v.tokens.clear();
    v.scores.clear();
    v.types.clear();
    CHECK(error_of(v).find("no tokens") != std::string::npos);
    v = good;
    v.unk_id = 512;
    CHECK(error_of(v).find("unknown token id 512") != std::string::npos);
    v = good;
    v.eos_id = -7;
    CHECK(error_of(v).find("EOS token id -7") != std::string::npos);
    v = good;
    v.tokens[400] = "";
    CHECK(error_of(v).find("token 400 is an empty piece") != std::string::npos);
    v = good;
    v.types[300] = 9;
    CHECK(error_of(v).find("unknown token type 9") != std::string::npos);
    v = good;
    v.types[100] = 1;  // <0x61> as a normal piece: byte fallback now lacks one of its 256 bytes
    CHECK(error_of(v).find("sentencepiece rejects") != std::string::npos);
  }

  TEST_CASE("from_vocab: special tokens are found by id, not by name") {
    // pieces: 0 <pad>, 1 <UNK>, 2 </S>, 3 <BOS>, then the byte pieces and a few merges.
    Vocab v;
    v.tokens = {"<pad>", "<UNK>", "</S>", "<BOS>"};
    for (int b = 0; b < 256; ++b) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "<0x%02X>", b);
      v.tokens.push_back(buf);
    }
    for (const char* p : {"\xE2\x96\x81", "a", "b", "\xE2\x96\x81" "a", "\xE2\x96\x81" "b", "ab"})
      v.tokens.push_back(p);
    v.scores.assign(v.tokens.size(), 0.0f);
    for (size_t i = 260; i < v.tokens.size(); ++i) v.scores[i] = -float(i);
    v.pad_id = 0;
    v.unk_id = 1;
    v.eos_id = 2;
    v.bos_id = 3;
    const Tokenizer t = Tokenizer::from_vocab(v, "tiny");
    CHECK(t.bos_id() == 3);
    CHECK(t.eos_id() == 2);
    CHECK(t.vocab_size() == 266);
    CHECK(t.encode("a  b", true) == std::vector<int32_t>{3, 263, 260, 264});
    CHECK(t.encode("ab", false) == std::vector<int32_t>{263, 262});
    CHECK(t.decode(std::vector<int32_t>{0, 3, 263, 2, 264}) == "a b");
    CHECK(t.encode("é", false) == std::vector<int32_t>{260, 4 + 0xC3, 4 + 0xA9});
    CHECK(t.decode(std::vector<int32_t>{1}) == " \xE2\x81\x87 ");  // sentencepiece's default unk surface
  }
}

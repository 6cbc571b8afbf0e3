// The grammar matcher's token mask (engine/grammar): fill_mask per call on a 128k-entry byte-level vocabulary,
// for a JSON grammar and a JSON Schema's grammar (json_schema.h) at several points of a document, with the mask cache warm (the steady state of a
// request), without it (the plain pruned trie walk), and a fresh grammar's first masks (the cache being built).
//
//   ./bench_grammar
//   ./bench_grammar --benchmark_filter='fill_mask/'
//   INFLIGHT_BENCH_TOKENIZER=path/to/tokenizer.json ./bench_grammar   # a real vocabulary instead (any file or
//                                                                      # folder engine::load_tokenizer reads)
//
// The vocabulary is synthetic but shaped like Llama 3's: the 256 bytes, then 128k pieces: English-like words
// with and without a leading space (and capitalised), numbers, punctuation runs, whitespace runs, JSON pieces
// (`":`, `",`, `{"`, ...) and a few multi-byte characters.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "engine/grammar/grammar.h"
#include "engine/grammar/json_schema.h"
#include "engine/grammar/mask_cache.h"
#include "engine/grammar/matcher.h"
#include "engine/model_loader.h"

namespace {

using inflight::engine::grammar::Grammar;
using inflight::engine::grammar::Matcher;
using inflight::engine::grammar::parse_gbnf;
using inflight::engine::grammar::TokenVocab;

constexpr int kNumWords = 128'000;

const char* json_gbnf() {
  return R"(root    ::= ws value ws
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

std::shared_ptr<const TokenVocab> make_vocab() {
  std::mt19937 rng(42);
  const std::vector<std::string> onsets = {"", "b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t",
                                           "v", "w", "st", "th", "ch", "sh", "pr", "tr", "gr", "bl", "str"};
  const std::vector<std::string> vowels = {"a", "e", "i", "o", "u", "ea", "ou", "io", "ai", "ee"};
  const std::vector<std::string> codas = {"", "", "n", "r", "s", "t", "l", "nd", "ng", "st", "ck", "rt", "ed", "er"};
  const std::vector<std::string> puncts = {".", ",", ":", ";", "!", "?", "(", ")", "'", "-", "...", "--", "\"", "\\"};
  const std::vector<std::string> json = {"\":", "\",", "{\"", "\"}", "[\"", "\"]", "\": \"", "\", \"", "},", "],",
                                         "}}", "]}", "\":[", "\":{", "\\n", "\\\"", "\\u00", "null", "true", "false"};
  const std::vector<std::string> multibyte = {"\xC3\xA9", "\xC3\xB6", "\xE2\x80\x99", "\xE2\x80\x94", "\xE4\xB8\xAD",
                                              "\xF0\x9F\x98\x80", "\xCE\xB1"};
  auto pick = [&](const std::vector<std::string>& v) { return v[rng() % v.size()]; };
  std::set<std::string> words;
  while (words.size() < size_t(kNumWords)) {
    const uint32_t kind = rng() % 100;
    std::string w;
    if (kind < 70) {  // a word of 1-4 syllables, maybe with a leading space, maybe capitalised
      for (int s = 1 + int(rng() % 4); s > 0; --s) w += pick(onsets) + pick(vowels) + pick(codas);
      if (rng() % 4 == 0) w[0] = char(std::toupper(static_cast<unsigned char>(w[0])));
      if (rng() % 2 == 0) w = " " + w;
      if (rng() % 8 == 0) w += pick(puncts);
    } else if (kind < 80) {  // numbers
      w = std::to_string(rng() % (kind < 75 ? 1000 : 100000));
      if (rng() % 3 == 0) w = " " + w;
    } else if (kind < 88) {  // JSON pieces, alone or glued to a word
      w = pick(json);
      if (rng() % 2 == 0) w += pick(onsets) + pick(vowels);
    } else if (kind < 94) {  // punctuation and whitespace runs
      for (int s = 1 + int(rng() % 3); s > 0; --s) w += rng() % 2 ? pick(puncts) : std::string(1 + rng() % 4, " \n\t"[rng() % 3]);
    } else {  // multi-byte characters
      w = (rng() % 2 ? " " : "") + pick(multibyte) + (rng() % 2 ? pick(vowels) : "");
    }
    words.insert(w);
  }
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, char(b));
  tokens.insert(tokens.end(), words.begin(), words.end());
  tokens.emplace_back("<eos>");
  const auto eos = int32_t(tokens.size() - 1);
  return std::make_shared<const TokenVocab>(std::move(tokens), eos);
}

const std::shared_ptr<const TokenVocab>& vocab() {
  static const std::shared_ptr<const TokenVocab> v = [] {
    if (const char* path = std::getenv("INFLIGHT_BENCH_TOKENIZER"))
      return std::make_shared<const TokenVocab>(inflight::engine::load_tokenizer(path));
    return make_vocab();
  }();
  return v;
}
const std::shared_ptr<const Grammar>& json_grammar() {
  static const std::shared_ptr<const Grammar> g = parse_gbnf(json_gbnf());
  return g;
}

// A JSON Schema of the kind tools and response formats use, through json_schema.h (compact JSON).
const char* person_schema() {
  return R"({"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 64},
    "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "email": {"type": "string", "format": "email"},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
    "address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                "required": ["city", "zip"], "additionalProperties": false}},
    "required": ["name", "age", "email", "tags", "address"], "additionalProperties": false})";
}
const std::shared_ptr<const Grammar>& schema_grammar() {
  static const std::shared_ptr<const Grammar> g =
      parse_gbnf(inflight::engine::grammar::json_schema_to_gbnf(std::string_view(person_schema())));
  return g;
}

// Points of a document: the text accepted before the mask.
struct Point {
  const char* name;
  const char* prefix;
};
const Point kPoints[] = {
    {"start", ""},
    {"object_key", "{\""},
    {"after_key", "{\"name\""},
    {"value", "{\"name\": "},
    {"in_string", "{\"name\": \"Al"},
    {"in_number", "{\"name\": \"Al\", \"age\": 4"},
    {"after_value", "{\"name\": \"Al\", \"age\": 42"},
    {"nested_array", "{\"name\": \"Al\", \"tags\": [[1, 2], ["},
    {"after_comma", "{\"name\": \"Al\", "},
    {"escape", "{\"name\": \"Al\\"},
    {"mid_character", "{\"name\": \"Al\xC3"},
    {"deep_string", "{\"a\": {\"b\": [{\"c\": [[\"x"},
    {"deep_after_value", "{\"a\": {\"b\": [{\"c\": [[1"},
};

const Point kSchemaPoints[] = {
    {"schema_start", ""},
    {"schema_name", "{\"name\":\"Al"},
    {"schema_age", "{\"name\":\"Al\",\"age\":4"},
    {"schema_email", "{\"name\":\"Al\",\"age\":42,\"email\":\"al@ex"},
    {"schema_tags", "{\"name\":\"Al\",\"age\":42,\"email\":\"al@ex.com\",\"tags\":[\"a\",\"b"},
    {"schema_zip", "{\"name\":\"Al\",\"age\":42,\"email\":\"al@ex.com\",\"tags\":[],\"address\":{\"city\":\"X\",\"zip\":\"12"},
};

Matcher matcher_at(const Point& p, const std::shared_ptr<const Grammar>& grammar = json_grammar()) {
  Matcher m(grammar, vocab());
  if (!m.accept_bytes(p.prefix)) std::abort();
  return m;
}

void fill_mask(benchmark::State& state, const Point& point, bool cached,
               const std::shared_ptr<const Grammar>& grammar = json_grammar()) {
  const Matcher m = matcher_at(point, grammar);
  std::vector<uint32_t> mask((size_t(vocab()->size()) + 31) / 32);
  m.fill_mask(mask);  // warms the cache
  for (auto _ : state) {
    if (cached) m.fill_mask(mask);
    else m.fill_mask_uncached(mask);
    benchmark::DoNotOptimize(mask.data());
  }
  int allowed = 0;
  for (uint32_t w : mask) allowed += __builtin_popcount(w);
  state.counters["allowed"] = allowed;
  state.counters["vocab"] = vocab()->size();
}

// A fresh grammar's first masks at every point of `points`: the mask cache built as a first request builds it.
template <size_t N>
void first_masks(benchmark::State& state, const std::string& gbnf, const Point (&points)[N]) {
  std::vector<uint32_t> mask((size_t(vocab()->size()) + 31) / 32);
  size_t num_entries = 0;
  for (auto _ : state) {
    const auto g = parse_gbnf(gbnf);  // a new grammar: an empty cache
    for (const Point& p : points) {
      Matcher m(g, vocab());
      if (!m.accept_bytes(p.prefix)) std::abort();
      m.fill_mask(mask);
    }
    num_entries = inflight::engine::grammar::detail::MaskCache::of(*g, vocab())->num_entries();
  }
  state.counters["cache_entries"] = double(num_entries);
}

// One token accepted then rolled back, inside a string (the per-step cost besides the mask).
void accept_token(benchmark::State& state) {
  Matcher m = matcher_at(kPoints[4]);
  std::vector<uint32_t> mask((size_t(vocab()->size()) + 31) / 32);
  m.fill_mask(mask);
  int32_t id = -1;
  for (int32_t i = 300; i < vocab()->size() && id < 0; ++i)
    if (m.allows(i) && vocab()->token_bytes(i).size() >= 4) id = i;
  for (auto _ : state) {
    benchmark::DoNotOptimize(m.accept_token(id));
    m.rollback(1);
  }
}

const bool kRegistered = [] {
  for (const Point& p : kPoints) {
    benchmark::RegisterBenchmark((std::string("fill_mask/") + p.name).c_str(),
                                 [&p](benchmark::State& s) { fill_mask(s, p, true); })
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark((std::string("fill_mask_uncached/") + p.name).c_str(),
                                 [&p](benchmark::State& s) { fill_mask(s, p, false); })
        ->Unit(benchmark::kMicrosecond);
  }
  for (const Point& p : kSchemaPoints) {
    benchmark::RegisterBenchmark((std::string("fill_mask/") + p.name).c_str(),
                                 [&p](benchmark::State& s) { fill_mask(s, p, true, schema_grammar()); })
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark((std::string("fill_mask_uncached/") + p.name).c_str(),
                                 [&p](benchmark::State& s) { fill_mask(s, p, false, schema_grammar()); })
        ->Unit(benchmark::kMicrosecond);
  }
  benchmark::RegisterBenchmark("first_masks/json", [](benchmark::State& s) { first_masks(s, json_gbnf(), kPoints); })
      ->Unit(benchmark::kMillisecond)
      ->Iterations(1);
  benchmark::RegisterBenchmark("first_masks/schema", [](benchmark::State& s) {
    first_masks(s, inflight::engine::grammar::json_schema_to_gbnf(std::string_view(person_schema())), kSchemaPoints);
  })->Unit(benchmark::kMillisecond)->Iterations(1);
  benchmark::RegisterBenchmark("accept_token/in_string", accept_token)->Unit(benchmark::kMicrosecond);
  return true;
}();

}  // namespace

BENCHMARK_MAIN();

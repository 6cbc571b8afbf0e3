// stories260K, GGUF and HF layouts, against the greedy outputs of llama2.c's run.c
// (tests/data/golden/stories260K_greedy.json, or the file named by INFLIGHT_STORIES_GOLDEN).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/generator.h"
#include "engine/model_loader.h"
#include "engine_support.h"
#include "test_support.h"

using namespace inflight;

namespace {

struct Run {
  std::vector<int32_t> prompt_ids;
  engine::GenerateResult result;
};

Run run_greedy(engine::LoadedModel& m, engine::Model& model, const std::string& prompt, int num_tokens,
               int block_size, kernels::KvDType dtype, int keep_logits, int prefill_chunk = 0,
               int quant_group = 0) {
  const engine::ModelConfig& c = model.config();
  Run run;
  run.prompt_ids = m.tokenizer.encode(prompt, true);
  const int64_t tokens = int64_t(run.prompt_ids.size()) + num_tokens;
  cache::KvCache kv({c.num_layers, c.num_kv_heads, c.head_dim, block_size,
                     int((tokens + block_size - 1) / block_size), dtype, quant_group});
  engine::GenerateOptions o;
  o.max_tokens = num_tokens;
  o.sampling.temperature = 0.0f;
  o.stop_at_eos = false;  // run.c stops on BOS only
  o.keep_logits = keep_logits;
  o.prefill_chunk = prefill_chunk;
  run.result = engine::generate(model, kv, m.tokenizer, run.prompt_ids, o);
  CHECK(kv.pool().num_free() == kv.config().num_blocks);  // every block given back
  return run;
}

// `path` names the model in messages; "" loads the built-in default model.
void check_model_against_golden(const std::string& path) {
  const nlohmann::json golden = test::load_stories_golden();
  engine::LoadedModel m = path.empty() ? engine::load_builtin_model() : engine::load_model(path);
  engine::Model model(std::move(m.weights));

  struct Variant {
    int block_size;
    kernels::KvDType dtype;
    int prefill_chunk;
  };
  const Variant variants[] = {{16, kernels::KvDType::F32, 0}, {1, kernels::KvDType::F32, 0},
                              {64, kernels::KvDType::F32, 0}, {16, kernels::KvDType::F32, 3},
                              {16, kernels::KvDType::F16, 0}};
  for (const Variant& v : variants) {
    float max_err = 0.0f;
    for (const auto& cs : golden["cases"]) {
      const std::string prompt = cs["prompt"];
      const auto want_prompt = cs["prompt_token_ids"].get<std::vector<int32_t>>();
      const auto want_ids = cs["generated_token_ids"].get<std::vector<int32_t>>();
      const auto& want_logits = cs["logits"];
      CAPTURE(path);
      CAPTURE(prompt);
      CAPTURE(v.block_size);
      CAPTURE(kernels::kv_dtype_name(v.dtype));
      CAPTURE(v.prefill_chunk);
      const Run run = run_greedy(m, model, prompt, int(want_ids.size()), v.block_size, v.dtype,
                                 int(want_logits.size()), v.prefill_chunk);
      CHECK(run.prompt_ids == want_prompt);
      CHECK(run.result.generated_ids == want_ids);
      if (v.dtype == kernels::KvDType::F32 && v.prefill_chunk == 0) CHECK(run.result.text == cs["generated_text"]);
      REQUIRE(run.result.logits.size() == want_logits.size());
      for (size_t k = 0; k < want_logits.size(); ++k) {
        const auto want = want_logits[k]["values"].get<std::vector<float>>();
        REQUIRE(run.result.logits[k].size() == want.size());
        for (size_t i = 0; i < want.size(); ++i)
          max_err = std::max(max_err, std::fabs(run.result.logits[k][i] - want[i]));
      }
    }
    MESSAGE(path << " block " << v.block_size << " kv " << kernels::kv_dtype_name(v.dtype) << " chunk "
                 << v.prefill_chunk << ": max |logit - golden| = " << max_err);
    if (v.dtype == kernels::KvDType::F32) CHECK(max_err <= 1e-4f);
  }

  // The 200-position runs: ids only.
  for (const auto& r : golden["long_greedy_runs"]["runs"]) {
    const auto want_ids = r["generated_token_ids"].get<std::vector<int32_t>>();
    CAPTURE(r["prompt"].get<std::string>());
    const Run run = run_greedy(m, model, r["prompt"], int(want_ids.size()), 16, kernels::KvDType::F32, 0);
    CHECK(run.prompt_ids == r["prompt_token_ids"].get<std::vector<int32_t>>());
    CHECK(run.result.generated_ids == want_ids);
  }
}

// stories260K with a quantized KV cache: token agreement with run.c's greedy output and the largest
// logit error, per dtype. Int8 with grouped scales must keep the first 32 tokens of every case.
void report_quantized_kv(const std::string& path) {
  const nlohmann::json golden = test::load_stories_golden();
  engine::LoadedModel m = engine::load_model(path);
  engine::Model model(std::move(m.weights));
  struct Variant {
    const char* name;
    kernels::KvDType dtype;
    int quant_group;  // Int8: channels per scale (0: head_dim)
    bool must_keep_32;
  };
  const int head_dim = model.config().head_dim;
  const Variant variants[] = {{"int8 group 8", kernels::KvDType::Int8, 8, true},
                              {"int8 group = head_dim", kernels::KvDType::Int8, 0, true},
                              {"fp8 e4m3", kernels::KvDType::Fp8E4M3, 0, false},
                              {"fp8 e5m2", kernels::KvDType::Fp8E5M2, 0, false},
                              {"int8 static", kernels::KvDType::Int8Static, 0, false},
                              {"bf16", kernels::KvDType::BF16, 0, false}};
  for (const Variant& v : variants) {
    float max_err = 0.0f;
    int agree = 0, total = 0, first_32_kept = 0, num_cases = 0;
    for (const auto& cs : golden["cases"]) {
      const auto want_ids = cs["generated_token_ids"].get<std::vector<int32_t>>();
      const auto& want_logits = cs["logits"];
      const Run run = run_greedy(m, model, cs["prompt"], int(want_ids.size()), 16, v.dtype, int(want_logits.size()), 0,
                                 v.quant_group);
      const auto& got = run.result.generated_ids;
      size_t same = 0;
      while (same < got.size() && same < want_ids.size() && got[same] == want_ids[same]) ++same;
      for (size_t i = 0; i < want_ids.size(); ++i) agree += i < got.size() && got[i] == want_ids[i];
      total += int(want_ids.size());
      ++num_cases;
      first_32_kept += same >= 32;
      if (v.must_keep_32) {
        CAPTURE(v.name);
        CAPTURE(cs["prompt"].get<std::string>());
        CHECK(same >= 32);
      }
      for (size_t k = 0; k < want_logits.size() && k < run.result.logits.size(); ++k) {
        const auto want = want_logits[k]["values"].get<std::vector<float>>();
        for (size_t i = 0; i < want.size(); ++i)
          max_err = std::max(max_err, std::fabs(run.result.logits[k][i] - want[i]));
      }
    }
    MESSAGE(path << " kv " << std::string(v.name) << " (head_dim " << head_dim << "): " << agree << "/" << total
                 << " generated tokens agree with golden, first 32 kept in " << first_32_kept << "/" << num_cases
                 << " cases, max |logit - golden| = " << max_err);
  }
}

}  // namespace

TEST_SUITE("golden") {
  TEST_CASE("stories260K with quantized KV: token agreement and logit error report") {
    report_quantized_kv(test::stories_gguf());
  }
  TEST_CASE("stories260K GGUF reproduces run.c greedy tokens and logits") {
    check_model_against_golden(test::stories_gguf());
  }
  TEST_CASE("stories260K Hugging Face folder reproduces run.c greedy tokens and logits") {
    check_model_against_golden(test::stories_hf());
  }
  TEST_CASE("the built-in default model (embedded stories260K) reproduces run.c greedy tokens and logits") {
    check_model_against_golden("");
  }
}

// stories260K, GGUF and HF layouts, against the greedy outputs of llama2.c's run.c
// (../shared/golden/stories260K_greedy.json, or the file named by INFLIGHT_STORIES_GOLDEN).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/generator.h"
#include "engine/model_loader.h"
#include "test_support.h"

using namespace inflight;

namespace {

nlohmann::json load_golden() {
  const char* env = std::getenv("INFLIGHT_STORIES_GOLDEN");
  const std::string path = env ? env : (test::shared_dir() / "golden" / "stories260K_greedy.json").string();
  std::ifstream f(path);
  REQUIRE_MESSAGE(f.good(), "cannot open golden file " << path);
  return nlohmann::json::parse(f);
}

struct Run {
  std::vector<int32_t> prompt_ids;
  engine::GenerateResult result;
};

Run run_greedy(engine::LoadedModel& m, engine::Model& model, const std::string& prompt, int num_tokens,
               int block_size, kernels::KvDType dtype, int keep_logits, int prefill_chunk = 0) {
  const engine::ModelConfig& c = model.config();
  Run run;
  run.prompt_ids = m.tokenizer.encode(prompt, true);
  const int64_t tokens = int64_t(run.prompt_ids.size()) + num_tokens;
  cache::KvCache kv({c.num_layers, c.num_kv_heads, c.head_dim, block_size,
                     int((tokens + block_size - 1) / block_size), dtype});
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

void check_model_against_golden(const std::string& path) {
  const nlohmann::json golden = load_golden();
  engine::LoadedModel m = engine::load_model(path);
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

}  // namespace

TEST_SUITE("golden") {
  TEST_CASE("stories260K GGUF reproduces run.c greedy tokens and logits") {
    check_model_against_golden(test::stories_gguf());
  }
  TEST_CASE("stories260K Hugging Face folder reproduces run.c greedy tokens and logits") {
    check_model_against_golden(test::stories_hf());
  }
}

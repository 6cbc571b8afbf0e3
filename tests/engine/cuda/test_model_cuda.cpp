// The whole model on the GPU (engine::Device::Cuda), on stories260K: llama2.c's greedy golden tokens and
// logits, the engine's batch invariance (plain, chunked, preempting), and beams and n > 1 against the CPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>

#include "engine/generator.h"
#include "engine/model_loader.h"
#include "engine_support.h"
#include "test_support.h"

using namespace inflight;

namespace {

struct Models {
  engine::LoadedModel loaded = engine::load_model(test::stories_gguf());
  engine::Model gpu{engine::load_model(test::stories_gguf()).weights, engine::Device::Cuda};
  engine::Model cpu{std::move(loaded.weights)};
  const engine::Tokenizer& tok = loaded.tokenizer;

  std::unique_ptr<cache::KvCache> make_kv(engine::Device d, int num_blocks, int block_size,
                                          kernels::KvDType dtype = kernels::KvDType::F32) {
    const auto& c = cpu.config();
    cache::KvCacheConfig config{c.num_layers, c.num_kv_heads, c.head_dim, block_size, num_blocks, dtype};
    config.device = d == engine::Device::Cuda ? cache::KvDevice::Cuda : cache::KvDevice::Cpu;
    return std::make_unique<cache::KvCache>(config);
  }
  engine::Model& model(engine::Device d) { return d == engine::Device::Cuda ? gpu : cpu; }

  engine::GenerateResult greedy(engine::Device d, const std::vector<int32_t>& prompt, int max_tokens,
                                int block_size = 16, kernels::KvDType dtype = kernels::KvDType::F32,
                                int keep_logits = 0, int prefill_chunk = 0) {
    auto kv = make_kv(d, int((prompt.size() + max_tokens) / block_size) + 2, block_size, dtype);
    engine::GenerateOptions o;
    o.max_tokens = max_tokens;
    o.sampling.temperature = 0.0f;
    o.stop_at_eos = false;
    o.keep_logits = keep_logits;
    o.prefill_chunk = prefill_chunk;
    engine::GenerateResult r = engine::generate(model(d), *kv, tok, prompt, o);
    CHECK(kv->pool().num_free() == kv->config().num_blocks);
    return r;
  }
};

Models& models() {
  static Models m;
  return m;
}

// 16 requests at once through an engine on the GPU; each must give the tokens it gives alone on the GPU.
void run_concurrently(engine::EngineConfig config, int num_blocks, int block_size, bool expect_preemption) {
  Models& m = models();
  struct Case {
    std::vector<int32_t> prompt;
    int max_tokens;
    std::vector<int32_t> alone;
  };
  std::vector<Case> cases;
  for (int i = 0; i < 16; ++i) {
    Case c;
    c.prompt = m.tok.encode(test::kStoryPrompts[i % 8], true);
    c.max_tokens = 8 + (i * 13) % 57;
    c.alone = m.greedy(engine::Device::Cuda, c.prompt, c.max_tokens).generated_ids;
    cases.push_back(std::move(c));
  }
  auto kv = m.make_kv(engine::Device::Cuda, num_blocks, block_size);
  engine::Engine eng(m.gpu, m.tok, *kv, config);
  std::vector<test::Collector> collectors(cases.size());
  for (size_t i = 0; i < cases.size(); ++i)
    eng.submit(collectors[i].attach(test::greedy_request(cases[i].prompt, cases[i].max_tokens)));
  for (size_t i = 0; i < cases.size(); ++i) {
    const test::Outcome o = collectors[i].wait();
    CAPTURE(i);
    CHECK(o.error.empty());
    CHECK(o.choices.at(0).tokens == cases[i].alone);
  }
  const engine::EngineStats s = eng.stats();
  MESSAGE("steps " << s.num_steps << ", preemptions " << s.num_preemptions);
  if (expect_preemption) CHECK(s.num_preemptions > 0);
  eng.shutdown();
  CHECK(kv->pool().num_free() == num_blocks);
}

}  // namespace

TEST_SUITE("model_cuda") {
  TEST_CASE("stories260K on the GPU: llama2.c's greedy tokens, logits within 1e-3, every block size and KV f32 / f16") {
    Models& m = models();
    const nlohmann::json golden = test::load_stories_golden();
    struct Variant {
      int block_size;
      kernels::KvDType dtype;
      int prefill_chunk;
    };
    for (const Variant& v : {Variant{16, kernels::KvDType::F32, 0}, Variant{1, kernels::KvDType::F32, 0},
                             Variant{64, kernels::KvDType::F32, 0}, Variant{16, kernels::KvDType::F32, 3},
                             Variant{16, kernels::KvDType::F16, 0}}) {
      float max_err = 0.0f;
      for (const auto& cs : golden["cases"]) {
        const auto prompt = m.tok.encode(cs["prompt"].get<std::string>(), true);
        const auto want_ids = cs["generated_token_ids"].get<std::vector<int32_t>>();
        const auto& want_logits = cs["logits"];
        CAPTURE(cs["prompt"].get<std::string>());
        CAPTURE(v.block_size);
        CAPTURE(kernels::kv_dtype_name(v.dtype));
        CAPTURE(v.prefill_chunk);
        const engine::GenerateResult r = m.greedy(engine::Device::Cuda, prompt, int(want_ids.size()), v.block_size,
                                                  v.dtype, int(want_logits.size()), v.prefill_chunk);
        CHECK(prompt == cs["prompt_token_ids"].get<std::vector<int32_t>>());
        CHECK(r.generated_ids == want_ids);
        REQUIRE(r.logits.size() == want_logits.size());
        for (size_t k = 0; k < want_logits.size(); ++k) {
          const auto want = want_logits[k]["values"].get<std::vector<float>>();
          REQUIRE(r.logits[k].size() == want.size());
          for (size_t i = 0; i < want.size(); ++i) max_err = std::max(max_err, std::fabs(r.logits[k][i] - want[i]));
        }
      }
      MESSAGE("GPU block " << v.block_size << " kv " << kernels::kv_dtype_name(v.dtype) << " chunk "
                           << v.prefill_chunk << ": max |logit - golden| = " << max_err);
      if (v.dtype == kernels::KvDType::F32) CHECK(max_err <= 1e-3f);
    }
    for (const auto& r : golden["long_greedy_runs"]["runs"]) {
      const auto want_ids = r["generated_token_ids"].get<std::vector<int32_t>>();
      CAPTURE(r["prompt"].get<std::string>());
      const auto prompt = m.tok.encode(r["prompt"].get<std::string>(), true);
      CHECK(m.greedy(engine::Device::Cuda, prompt, int(want_ids.size())).generated_ids == want_ids);
    }
  }

  TEST_CASE("quantized KV on the GPU: the tokens the CPU gives with the same KV dtype") {
    Models& m = models();
    for (const kernels::KvDType dtype : {kernels::KvDType::BF16, kernels::KvDType::Int8, kernels::KvDType::Int8Static,
                                         kernels::KvDType::Fp8E4M3, kernels::KvDType::Fp8E5M2}) {
      int same = 0, total = 0;
      for (const char* text : test::kStoryPrompts) {
        const auto prompt = m.tok.encode(text, true);
        const auto cpu = m.greedy(engine::Device::Cpu, prompt, 48, 16, dtype).generated_ids;
        const auto gpu = m.greedy(engine::Device::Cuda, prompt, 48, 16, dtype).generated_ids;
        for (size_t i = 0; i < cpu.size() && cpu[i] == gpu[i]; ++i) ++same;
        total += int(cpu.size());
      }
      MESSAGE(kernels::kv_dtype_name(dtype) << ": " << same << " / " << total
                                            << " tokens equal to the CPU's before the first difference");
      CHECK(same >= total * 9 / 10);
    }
  }

  TEST_CASE("16 concurrent greedy requests on the GPU equal each run alone: plain, chunked, preempting") {
    run_concurrently({.max_num_seqs = 16, .max_num_batched_tokens = 512}, 256, 16, false);
    run_concurrently({.max_num_seqs = 16, .max_num_batched_tokens = 8}, 256, 16, false);
    run_concurrently({.max_num_seqs = 16, .max_num_batched_tokens = 64, .enable_prefix_caching = false}, 12, 8, true);
  }

  TEST_CASE("beam search and n > 1 on the GPU give the CPU's tokens") {
    Models& m = models();
    auto run = [&](engine::Device d, const engine::Request& r) {
      auto kv = m.make_kv(d, 256, 4);
      engine::Engine eng(m.model(d), m.tok, *kv, {.enable_prefix_caching = false});
      test::Collector col;
      eng.submit(col.attach(r));
      const test::Outcome o = col.wait();
      eng.shutdown();
      CHECK(kv->pool().num_free() == 256);
      return o;
    };
    engine::Request beams;
    beams.prompt_ids = m.tok.encode("Once upon a time", true);
    beams.beam_width = 4;
    beams.n = 3;
    beams.stop.max_tokens = 24;
    engine::Request samples = test::greedy_request(m.tok.encode(test::kStoryPrompts[6], true), 20);
    samples.n = 4;
    samples.sampling = {.temperature = 0.9f, .top_k = 20, .seed = 1234};
    for (const engine::Request& r : {beams, samples}) {
      const test::Outcome cpu = run(engine::Device::Cpu, r), gpu = run(engine::Device::Cuda, r);
      CAPTURE(r.beam_width);
      REQUIRE(gpu.choices.size() == cpu.choices.size());
      for (const auto& [i, choice] : cpu.choices) {
        CAPTURE(i);
        CHECK(gpu.choices.at(i).tokens == choice.tokens);
      }
    }
  }

  TEST_CASE("a CPU model refuses a GPU KV cache, and a GPU model a CPU one") {
    Models& m = models();
    auto on_gpu = m.make_kv(engine::Device::Cuda, 8, 16);
    auto on_cpu = m.make_kv(engine::Device::Cpu, 8, 16);
    engine::GenerateOptions o;
    o.max_tokens = 2;
    const auto prompt = m.tok.encode("A fox", true);
    CHECK_THROWS_AS(engine::generate(m.cpu, *on_gpu, m.tok, prompt, o), std::logic_error);
    CHECK_THROWS_AS(engine::generate(m.gpu, *on_cpu, m.tok, prompt, o), std::logic_error);
  }
}

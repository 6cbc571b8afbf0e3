// An EngineFault inside a step (the test hook debug_fault_at_step) stops the engine thread: every request
// in flight or queued ends with an ErrorEvent, alive() turns false, and submit() refuses with
// EngineDeadError instead of queueing a request nobody would run.
#include <doctest/doctest.h>

#include "engine/model_loader.h"
#include "engine_support.h"
#include "test_support.h"

using namespace inflight;

TEST_CASE("engine fault: the thread stops, requests in flight end with an error, submit refuses") {
  engine::LoadedModel loaded = engine::load_model(test::stories_gguf());
  engine::Model model(std::move(loaded.weights));
  const auto& c = model.config();
  cache::KvCache kv({c.num_layers, c.num_kv_heads, c.head_dim, 16, 64, kernels::KvDType::F32});
  engine::EngineConfig config;
  config.debug_fault_at_step = 4;
  // Steps 1-3 take at least 3 x 20 ms, so the three requests are normally all in flight at the fault.
  // Should the engine still fault first on a starved machine, the refused submit is what a client
  // sees then, and the request is not counted.
  config.debug_step_delay_ms = 20;
  engine::Engine eng(model, loaded.tokenizer, kv, config);

  const std::vector<int32_t> prompt = loaded.tokenizer.encode("Once upon a time", true);
  std::vector<test::Collector> collectors(3);
  size_t submitted = 0;
  for (auto& col : collectors) {
    engine::Request r;
    r.prompt_ids = prompt;
    r.sampling.temperature = 0.0f;
    r.stop.max_tokens = 40;
    r.stop.ignore_eos = true;
    try {
      eng.submit(col.attach(std::move(r)));
      ++submitted;
    } catch (const engine::EngineDeadError&) {
      break;
    }
  }
  REQUIRE(submitted >= 1);  // the first submit comes before any step, so it cannot be refused
  MESSAGE(submitted << " of 3 requests in flight at the fault");
  for (size_t i = 0; i < submitted; ++i) {
    const test::Outcome o = collectors[i].wait();
    CHECK(o.done);
    CHECK(o.error.find("engine fault") != std::string::npos);
    CHECK(o.num_events_after_last == 0);
    // Some tokens may have come before the fault; never all 40.
    CHECK((o.choices.empty() || o.choices.begin()->second.tokens.size() < 40));
  }
  CHECK_FALSE(eng.alive());
  engine::Request late;
  late.prompt_ids = prompt;
  CHECK_THROWS_AS(eng.submit(std::move(late)), engine::EngineDeadError);
  const engine::EngineStats stats = eng.stats();
  CHECK(stats.num_running == 0);
  CHECK(stats.num_waiting == 0);
  CHECK(stats.finished_by_reason.at("error") == submitted);
  eng.shutdown();  // after the fault: joins at once
}

// The engine's step ring buffer (StepLog) alone and under concurrent readers, and what the engine records
// in it and publishes as KV block states on stories260K.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "engine/engine.h"
#include "engine/model_loader.h"
#include "engine_support.h"
#include "test_support.h"

using namespace inflight;

namespace {

engine::StepRecord numbered(uint64_t step) {
  engine::StepRecord r;
  r.step = step;
  r.num_context_tokens = int(step % 7);
  r.num_generation_tokens = int(2 * step);
  r.num_context_seqs = int(step % 3);
  r.num_generation_seqs = int(step % 5);
  r.num_kv_blocks_used = int(step + 1);
  r.duration_seconds = double(step) * 0.5;
  return r;
}

// Every field derives from the step, so a record torn between two writes is caught.
bool consistent(const engine::StepRecord& r) {
  const engine::StepRecord want = numbered(r.step);
  return r.num_context_tokens == want.num_context_tokens && r.num_generation_tokens == want.num_generation_tokens &&
         r.num_context_seqs == want.num_context_seqs && r.num_generation_seqs == want.num_generation_seqs &&
         r.num_kv_blocks_used == want.num_kv_blocks_used && r.duration_seconds == want.duration_seconds;
}

std::vector<uint64_t> steps_of(const std::vector<engine::StepRecord>& records) {
  std::vector<uint64_t> steps;
  for (const engine::StepRecord& r : records) steps.push_back(r.step);
  return steps;
}

}  // namespace

TEST_SUITE("step_log") {
  TEST_CASE("the ring keeps the last `capacity` records, oldest first") {
    engine::StepLog log(4);
    CHECK(log.recent().empty());
    log.record(numbered(1));
    log.record(numbered(2));
    CHECK(steps_of(log.recent()) == std::vector<uint64_t>{1, 2});
    for (uint64_t s = 3; s <= 6; ++s) log.record(numbered(s));
    CHECK(steps_of(log.recent()) == std::vector<uint64_t>{3, 4, 5, 6});
    log.record(numbered(7));
    const std::vector<engine::StepRecord> recent = log.recent();
    CHECK(steps_of(recent) == std::vector<uint64_t>{4, 5, 6, 7});
    for (const engine::StepRecord& r : recent) CHECK(consistent(r));
  }

  TEST_CASE("readers copying while the writer records see whole records, consecutive, in order") {
    engine::StepLog log(64);
    constexpr uint64_t kSteps = 200000;
    std::atomic<bool> done{false};
    std::atomic<int> num_bad{0};
    std::atomic<int> num_snapshots{0};
    std::vector<std::thread> readers;
    for (int t = 0; t < 2; ++t)
      readers.emplace_back([&] {
        while (!done.load()) {
          const std::vector<engine::StepRecord> recent = log.recent();
          for (size_t i = 0; i < recent.size(); ++i)
            if (!consistent(recent[i]) || (i > 0 && recent[i].step != recent[i - 1].step + 1)) ++num_bad;
          ++num_snapshots;
        }
      });
    // At least kSteps records, and on until the readers have copied the ring 50 times (they may start late
    // on a busy machine).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    uint64_t s = 1;
    for (; s <= kSteps || (num_snapshots.load() < 50 && std::chrono::steady_clock::now() < deadline); ++s)
      log.record(numbered(s));
    done = true;
    for (std::thread& t : readers) t.join();
    CHECK(num_bad.load() == 0);
    CHECK(num_snapshots.load() >= 50);
    const std::vector<engine::StepRecord> last = log.recent();
    REQUIRE(last.size() == 64);
    CHECK(last.back().step == s - 1);
    CHECK(last.front().step == s - 64);
  }

  TEST_CASE("the engine records context and generation tokens per step and publishes block states") {
    engine::LoadedModel loaded = engine::load_model(test::stories_gguf());
    engine::Model model(std::move(loaded.weights));
    const auto& c = model.config();
    constexpr int kBlocks = 64;
    cache::KvCache kv({c.num_layers, c.num_kv_heads, c.head_dim, 16, kBlocks, kernels::KvDType::F32});
    engine::EngineConfig config;
    config.debug_step_delay_ms = 5;  // long enough for the polling below to see the request run
    engine::Engine eng(model, loaded.tokenizer, kv, config);
    using S = cache::BlockState;
    CHECK(eng.block_states() == std::vector<S>(kBlocks, S::Free));
    CHECK(eng.recent_steps().empty());

    // Two samples of one 25+ token prompt share its blocks; 40 tokens each.
    const std::vector<int32_t> prompt = loaded.tokenizer.encode(
        "The sun was shining and the birds were singing. Ben wanted to go outside and play with his friends", true);
    REQUIRE(prompt.size() > 16);
    engine::Request r;
    r.prompt_ids = prompt;
    r.n = 2;
    r.sampling.seed = 7;
    r.stop.max_tokens = 40;
    r.stop.ignore_eos = true;
    test::Collector collector;
    eng.submit(collector.attach(std::move(r)));

    bool saw_shared = false, saw_used = false;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!(saw_shared && saw_used) && std::chrono::steady_clock::now() < deadline) {
      const std::vector<S> states = eng.block_states();
      REQUIRE(states.size() == size_t(kBlocks));
      saw_shared |= std::count(states.begin(), states.end(), S::Shared) > 0;
      saw_used |= std::count(states.begin(), states.end(), S::Used) > 0;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    CHECK(saw_shared);  // the prompt's blocks, owned by both samples
    CHECK(saw_used);    // each sample's own generated blocks
    const test::Outcome o = collector.wait();
    REQUIRE(o.error.empty());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the step that finished it is published

    const std::vector<engine::StepRecord> steps = eng.recent_steps();
    REQUIRE(!steps.empty());
    CHECK(steps.front().step == 1);
    CHECK(steps.front().num_context_tokens == int(prompt.size()));
    CHECK(steps.front().num_context_seqs == 1);
    CHECK(steps.front().num_generation_tokens == 0);
    int context = 0, generation = 0;
    for (size_t i = 0; i < steps.size(); ++i) {
      CHECK(steps[i].step == i + 1);
      CHECK(steps[i].duration_seconds > 0);
      CHECK(steps[i].num_context_tokens + steps[i].num_generation_tokens > 0);
      if (i > 0) CHECK(steps[i].finished_at >= steps[i - 1].finished_at);
      context += steps[i].num_context_tokens;
      generation += steps[i].num_generation_tokens;
    }
    CHECK(context == int(prompt.size()));
    CHECK(generation == 2 * (40 - 1));  // each sample's last token is sampled, never computed
    CHECK(steps.back().num_generation_seqs == 2);
    CHECK(steps.back().num_kv_blocks_used == 0);  // both samples finished in the last step
    CHECK(uint64_t(steps.size()) == eng.stats().num_steps);

    // Idle: nothing in use; the full blocks (the prompt's first among them) stay as cached prefixes.
    const std::vector<S> after = eng.block_states();
    CHECK(std::count(after.begin(), after.end(), S::Used) == 0);
    CHECK(std::count(after.begin(), after.end(), S::Shared) == 0);
    CHECK(std::count(after.begin(), after.end(), S::Cached) >= int(prompt.size()) / 16);
    CHECK(std::count(after.begin(), after.end(), S::Cached) == kv.pool().num_cached());
  }
}

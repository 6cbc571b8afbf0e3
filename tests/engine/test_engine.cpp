// The engine with many requests at once, on stories260K: batch invariance, chunked prefill,
// preemption, cancellation, prefix caching, n > 1, stop strings; the pool never leaks.
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <thread>

#include "engine/generator.h"
#include "engine/model_loader.h"
#include "engine_support.h"
#include "test_support.h"

using namespace inflight;

namespace {

struct Fixture {
  engine::LoadedModel loaded = engine::load_model(test::stories_gguf());
  engine::Model model{std::move(loaded.weights)};
  const engine::Tokenizer& tok = loaded.tokenizer;

  std::unique_ptr<cache::KvCache> make_kv(int num_blocks, int block_size = 16) {
    const auto& c = model.config();
    return std::make_unique<cache::KvCache>(
        cache::KvCacheConfig{c.num_layers, c.num_kv_heads, c.head_dim, block_size, num_blocks, kernels::KvDType::F32});
  }

  // Greedy tokens of one prompt run alone, outside the engine.
  std::vector<int32_t> alone(const std::vector<int32_t>& prompt, int max_tokens) {
    auto kv = make_kv(64);
    engine::GenerateOptions o;
    o.max_tokens = max_tokens;
    o.sampling.temperature = 0.0f;
    o.stop_at_eos = false;
    return engine::generate(model, *kv, tok, prompt, o).generated_ids;
  }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

struct Case {
  std::vector<int32_t> prompt;
  int max_tokens;
  std::vector<int32_t> expected;
};

std::vector<Case> sixteen_cases() {
  Fixture& f = fixture();
  static std::vector<Case> cases;
  if (cases.empty()) {
    for (int i = 0; i < 16; ++i) {
      Case c;
      c.prompt = f.tok.encode(test::kStoryPrompts[i % 8], true);
      c.max_tokens = 8 + (i * 13) % 57;
      c.expected = f.alone(c.prompt, c.max_tokens);
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

void run_concurrently(engine::EngineConfig config, int num_blocks, int block_size, bool expect_preemption) {
  Fixture& f = fixture();
  const auto cases = sixteen_cases();
  auto kv = f.make_kv(num_blocks, block_size);
  engine::Engine eng(f.model, f.tok, *kv, config);
  std::vector<test::Collector> collectors(cases.size());
  for (size_t i = 0; i < cases.size(); ++i)
    eng.submit(collectors[i].attach(test::greedy_request(cases[i].prompt, cases[i].max_tokens)));
  for (size_t i = 0; i < cases.size(); ++i) {
    const test::Outcome o = collectors[i].wait();
    CAPTURE(i);
    CHECK(o.error.empty());
    CHECK(o.choices.at(0).tokens == cases[i].expected);
    CHECK(o.choices.at(0).reason == engine::FinishReason::Length);
    CHECK(o.usage.completion_tokens == cases[i].max_tokens);
    CHECK(o.usage.prompt_tokens == int(cases[i].prompt.size()));
  }
  const engine::EngineStats s = eng.stats();
  MESSAGE("steps " << s.num_steps << ", preemptions " << s.num_preemptions << ", peak blocks " << s.kv_blocks_peak
                   << "/" << num_blocks);
  if (expect_preemption) CHECK(s.num_preemptions > 0);
  eng.shutdown();
  CHECK(kv->pool().num_free() == num_blocks);  // nothing leaked (cached blocks count as free)
}

// One mixed step on stories260K with a 4-token block size: a's whole prompt, b's prompt after its first 10
// tokens (cached by an earlier step), and c's last prompt token after the rest of it: 2 context sequences
// and one of a single token, each wanting logits.
struct MixedStep {
  static constexpr int kBlockSize = 4;
  std::vector<int32_t> a, b, c;
  int na, nb, nc;
  explicit MixedStep(const engine::Tokenizer& tok)
      : a(tok.encode(test::kStoryPrompts[6], true)), b(tok.encode(test::kStoryPrompts[4], true)),
        c(tok.encode(test::kStoryPrompts[1], true)), na(int(a.size())), nb(int(b.size())), nc(int(c.size())) {
    REQUIRE(nb > 12);
  }
  // Block tables covering each prompt (a's one more token).
  std::vector<cache::BlockTable> reserve(cache::KvCache& kv) const {
    std::vector<cache::BlockTable> t(3, cache::BlockTable(kBlockSize));
    REQUIRE(t[0].reserve(kv.pool(), na + 1));
    REQUIRE(t[1].reserve(kv.pool(), nb));
    REQUIRE(t[2].reserve(kv.pool(), nc));
    return t;
  }
  // The step before: b's first 10 tokens and all of c but its last.
  engine::ScheduledBatch earlier(const std::vector<cache::BlockTable>& t) const {
    engine::ScheduledBatch s;
    s.add_sequence(b.data(), 10, 0, t[1].blocks().data(), t[1].num_blocks(), kBlockSize, false);
    s.add_sequence(c.data(), nc - 1, 0, t[2].blocks().data(), t[2].num_blocks(), kBlockSize, false);
    s.num_context_seqs = 2;
    return s;
  }
  engine::ScheduledBatch step(const std::vector<cache::BlockTable>& t) const {
    engine::ScheduledBatch s;
    s.add_sequence(a.data(), na, 0, t[0].blocks().data(), t[0].num_blocks(), kBlockSize, true);
    s.add_sequence(b.data() + 10, nb - 10, 10, t[1].blocks().data(), t[1].num_blocks(), kBlockSize, true);
    s.add_sequence(c.data() + nc - 1, 1, nc - 1, t[2].blocks().data(), t[2].num_blocks(), kBlockSize, true);
    s.num_context_seqs = 2;
    return s;
  }
};

}  // namespace

TEST_SUITE("engine") {
  TEST_CASE("16 concurrent greedy requests equal each request run alone") {
    run_concurrently({.max_num_seqs = 16, .max_num_batched_tokens = 512}, 256, 16, false);
  }
  TEST_CASE("the same with chunked prefill forced to 8 tokens a step") {
    run_concurrently({.max_num_seqs = 16, .max_num_batched_tokens = 8}, 256, 16, false);
  }
  TEST_CASE("the same with a KV pool so small that sequences are preempted and recomputed") {
    run_concurrently({.max_num_seqs = 16, .max_num_batched_tokens = 64, .enable_prefix_caching = false}, 12, 8, true);
    run_concurrently({.max_num_seqs = 16, .max_num_batched_tokens = 64}, 12, 8, true);
  }

  TEST_CASE("the same with the short-first prefill order: chunked prefill, and a pool small enough to preempt") {
    const auto sf = engine::PrefillOrder::kShortFirst;
    run_concurrently({.max_num_seqs = 16, .max_num_batched_tokens = 512, .prefill_order = sf}, 256, 16, false);
    run_concurrently({.max_num_seqs = 16, .max_num_batched_tokens = 8, .prefill_order = sf}, 256, 16, false);
    run_concurrently(
        {.max_num_seqs = 16, .max_num_batched_tokens = 64, .enable_prefix_caching = false, .prefill_order = sf}, 12, 8,
        true);
  }

  TEST_CASE("the same under a step-time budget: prompts arriving while others decode are prefilled in chunks") {
    engine::PrefillOrder order = engine::PrefillOrder::kFcfs;
    SUBCASE("fcfs") {}
    SUBCASE("short-first") { order = engine::PrefillOrder::kShortFirst; }
    Fixture& f = fixture();
    const auto cases = sixteen_cases();
    // Longer prompts for the late half: several of the eight prompts back to back (up to about 150 tokens).
    std::vector<std::vector<int32_t>> late_prompts;
    std::vector<std::vector<int32_t>> late_expected;
    for (int i = 0; i < 8; ++i) {
      std::vector<int32_t> p = f.tok.encode(test::kStoryPrompts[i], true);
      for (int j = 1; j <= i % 4 + 1; ++j)
        for (int32_t t : f.tok.encode(std::string(" ") + test::kStoryPrompts[(i + j) % 8], false)) p.push_back(t);
      late_expected.push_back(f.alone(p, 24));
      late_prompts.push_back(std::move(p));
    }
    std::vector<std::vector<int32_t>> early_expected;
    for (size_t i = 0; i < 8; ++i) early_expected.push_back(f.alone(cases[i].prompt, 64));
    // NOTE: every lone run before the engine starts: the compute pool serves one calling thread at a time.
    auto kv = f.make_kv(256, 16);
    engine::EngineConfig config{.max_num_seqs = 16, .max_num_batched_tokens = 512};
    // ms: 1 per step, 0.1 per prompt token, 0.5 per decoding sequence: 8 streams leave 3 ms, 30 tokens.
    config.max_step_ms = 8.0;
    config.prefill_order = order;
    config.fixed_step_cost = engine::StepCost{1.0, 0.1, 0.5, 0.0};
    config.debug_step_delay_ms = 1;  // the first eight are still decoding when the others arrive
    engine::Engine eng(f.model, f.tok, *kv, config);
    std::vector<test::Collector> early(8), late(8);
    for (size_t i = 0; i < 8; ++i) eng.submit(early[i].attach(test::greedy_request(cases[i].prompt, 64)));
    while (eng.stats().generated_tokens < 8 * 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    for (size_t i = 0; i < 8; ++i) eng.submit(late[i].attach(test::greedy_request(late_prompts[i], 24)));
    for (size_t i = 0; i < 8; ++i) {
      CAPTURE(i);
      CHECK(early[i].wait().choices.at(0).tokens == early_expected[i]);
      CHECK(late[i].wait().choices.at(0).tokens == late_expected[i]);
    }
    // Steps with decoding streams kept under the budget, except for a minimum chunk (short-first: the
    // oldest prompt's and the shortest one's).
    const int max_over = order == engine::PrefillOrder::kShortFirst ? 2 * 32 : 32;
    int num_mixed = 0;
    for (const engine::StepRecord& r : eng.recent_steps()) {
      if (r.num_generation_seqs == 0 || r.num_context_tokens == 0) continue;
      ++num_mixed;
      CAPTURE(r.step);
      CHECK((r.predicted_seconds * 1000 <= 8.0 + 1e-9 || r.num_context_tokens <= max_over));
    }
    MESSAGE(num_mixed << " steps with both prompt chunks and decoding streams");
    CHECK(num_mixed >= 4);
    eng.shutdown();
    CHECK(kv->pool().num_free() == 256);
  }

  TEST_CASE("cancellations at random steps and failing requests leave the pool free") {
    Fixture& f = fixture();
    auto kv = f.make_kv(64, 4);
    engine::Engine eng(f.model, f.tok, *kv, {.max_num_seqs = 8, .max_num_batched_tokens = 32});
    std::mt19937 rng(5);
    std::vector<test::Collector> collectors(24);
    std::vector<uint64_t> ids;
    for (size_t i = 0; i < collectors.size(); ++i) {
      engine::Request r = test::greedy_request(f.tok.encode(test::kStoryPrompts[i % 8], true), 40);
      if (i % 3 == 0) r.n = 2, r.sampling.temperature = 0.8f, r.sampling.seed = i;
      ids.push_back(eng.submit(collectors[i].attach(std::move(r))));
      if (i % 2 == 0) {
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
        eng.cancel(ids[rng() % ids.size()]);
      }
    }
    // Requests that can never run are refused up front, naming the problem.
    CHECK_THROWS_WITH_AS(eng.submit(test::greedy_request({1, 9999}, 4)), doctest::Contains("outside the vocabulary"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(eng.submit(test::greedy_request(std::vector<int32_t>(600, 5), 4)), doctest::Contains("context"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(eng.submit(test::greedy_request(std::vector<int32_t>(200, 5), 200)),
                         doctest::Contains("KV cache"), std::invalid_argument);
    int cancelled = 0;
    for (auto& c : collectors) {
      const test::Outcome o = c.wait();
      CHECK(o.num_events_after_last == 0);
      for (auto& [i, ch] : o.choices) {
        CHECK(ch.finished);
        cancelled += ch.reason == engine::FinishReason::Cancelled;
      }
    }
    MESSAGE(cancelled << " choices cancelled");
    eng.shutdown();
    CHECK(kv->pool().num_free() == 64);
  }

  TEST_CASE("prefix caching: a second request with the same long prefix computes only the new tokens") {
    Fixture& f = fixture();
    auto kv = f.make_kv(64, 16);
    engine::Engine eng(f.model, f.tok, *kv, {});
    const std::vector<int32_t> first = f.tok.encode(test::kStoryPrompts[6], true);
    std::vector<int32_t> second = first;
    for (int32_t t : f.tok.encode(" and then they went home", false)) second.push_back(t);

    test::Collector a, b;
    eng.submit(a.attach(test::greedy_request(first, 10)));
    const test::Outcome oa = a.wait();
    CHECK(oa.usage.cached_tokens == 0);
    const uint64_t computed_before = eng.stats().prompt_tokens;
    eng.submit(b.attach(test::greedy_request(second, 10)));
    const test::Outcome ob = b.wait();
    const int cached = int(first.size()) / 16 * 16;
    CHECK(ob.usage.cached_tokens == cached);
    CHECK(eng.stats().prompt_tokens - computed_before == second.size() - size_t(cached));
    CHECK(eng.stats().prefix_hit_tokens == uint64_t(cached));
    CHECK(ob.choices.at(0).tokens == f.alone(second, 10));
    eng.shutdown();
    CHECK(kv->pool().num_free() == 64);
    CHECK(kv->pool().num_cached() > 0);
  }

  TEST_CASE("n > 1: samples share the prompt's blocks and each equals a lone run with its seed") {
    Fixture& f = fixture();
    auto kv = f.make_kv(128, 16);
    engine::Engine eng(f.model, f.tok, *kv, {.enable_prefix_caching = false});
    const std::vector<int32_t> prompt = f.tok.encode(test::kStoryPrompts[6], true);  // 2+ blocks
    engine::Request r = test::greedy_request(prompt, 20);
    r.n = 4;
    r.sampling = {.temperature = 0.9f, .top_k = 20, .seed = 1234};
    test::Collector c;
    eng.submit(c.attach(r));
    const test::Outcome o = c.wait();
    const int prompt_blocks = int(prompt.size() + 15) / 16, gen_blocks = (20 + 15) / 16;
    CHECK(eng.stats().kv_blocks_peak <= prompt_blocks + 4 * (gen_blocks + 1));
    CHECK(eng.stats().kv_blocks_peak < 4 * prompt_blocks);
    REQUIRE(o.choices.size() == 4);
    for (int i = 0; i < 4; ++i) {
      engine::Request one = r;
      one.n = 1;
      one.sampling.seed = 1234 + i;
      test::Collector ci;
      eng.submit(ci.attach(one));
      CHECK(ci.wait().choices.at(0).tokens == o.choices.at(i).tokens);
    }
    CHECK(o.usage.completion_tokens == 4 * 20);
    eng.shutdown();
    CHECK(kv->pool().num_free() == 128);
  }

  TEST_CASE("stop strings end the text before them and are never emitted") {
    Fixture& f = fixture();
    auto kv = f.make_kv(64, 16);
    engine::Engine eng(f.model, f.tok, *kv, {});
    engine::Request r = test::greedy_request(f.tok.encode("", true), 64);
    r.stop.stop = {"girl named"};
    test::Collector c;
    eng.submit(c.attach(r));
    const test::Outcome o = c.wait();
    CHECK(o.choices.at(0).text == "Once upon a time, there was a little ");
    CHECK(o.choices.at(0).reason == engine::FinishReason::Stop);
    eng.shutdown();
  }

  TEST_CASE("a step of more tokens than max_pass_tokens runs as passes over slices of them, to the same bits") {
    Fixture& f = fixture();
    const auto& cfg = f.model.config();
    const MixedStep m(f.tok);
    const int bs = MixedStep::kBlockSize, na = m.na, nb = m.nb, nc = m.nc;
    auto run = [&](int max_pass, kernels::KvDType dtype, int* passes) {
      cache::KvCache kv(cache::KvCacheConfig{cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, bs, 64, dtype});
      std::vector<cache::BlockTable> t = m.reserve(kv);
      const int saved = f.model.max_pass_tokens();
      f.model.set_max_pass_tokens(0);
      std::vector<float> logits(size_t(3) * cfg.vocab_size);
      f.model.forward(m.earlier(t), kv, logits.data());
      f.model.set_max_pass_tokens(max_pass);
      f.model.forward(m.step(t), kv, logits.data());
      *passes = f.model.last_num_passes();
      f.model.set_max_pass_tokens(saved);
      for (auto& table : t) table.release(kv.pool());
      return logits;
    };
    for (const kernels::KvDType dtype : {kernels::KvDType::F32, kernels::KvDType::F16, kernels::KvDType::Int8}) {
      CAPTURE(int(dtype));
      int one = 0, passes = 0;
      const std::vector<float> whole = run(0, dtype, &one), sliced = run(7, dtype, &passes);
      CHECK(one == 1);
      CHECK(passes == (na + nb - 10 + 1 + 6) / 7);
      CHECK(whole == sliced);
    }

    // The slicing itself: tokens [3, na + 2) hold a's tail (3 tokens cached before it) and b's first two.
    cache::KvCache kv(
        cache::KvCacheConfig{cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, bs, 64, kernels::KvDType::F32});
    std::vector<cache::BlockTable> t = m.reserve(kv);
    const engine::ScheduledBatch step = m.step(t), part = step.token_range(3, na + 2);
    CHECK(part.num_tokens() == na - 1);
    CHECK(part.q_start == std::vector<int32_t>{0, na - 3, na - 1});
    CHECK(part.past_len == std::vector<int32_t>{3, 10});
    CHECK(part.positions.front() == 3);
    CHECK(part.positions.back() == 11);
    CHECK(part.logits_rows == std::vector<int32_t>{na - 4});
    CHECK(part.num_context_seqs == 2);
    CHECK(part.block_tables.size() == size_t(2 * step.max_blocks_per_seq));
    const engine::ScheduledBatch tail = step.token_range(na + 2, step.num_tokens());
    CHECK(tail.past_len == std::vector<int32_t>{12, nc - 1});
    CHECK(tail.logits_rows == std::vector<int32_t>{nb - 13, nb - 12});
    CHECK(tail.num_context_seqs == 1);
    for (auto& table : t) table.release(kv.pool());
  }

  TEST_CASE("the last layer computes only the rows that want logits, to the same logits and cache bits") {
    // The mixed step run with its logits rows (the last layer pruned to them) and with every row's logits
    // (nothing pruned). The wanted rows' logits and every cached K/V byte must match, and so must the logits
    // of a step after it.
    Fixture& f = fixture();
    const auto& cfg = f.model.config();
    const MixedStep m(f.tok);
    const int bs = MixedStep::kBlockSize;
    auto run = [&](kernels::KvDType dtype, bool all_rows, std::vector<uint8_t>* cache_bytes) {
      cache::KvCache kv(cache::KvCacheConfig{cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, bs, 64, dtype});
      const kernels::PagedKvView last = kv.layer_view(cfg.num_layers - 1);
      const size_t data_bytes = size_t(last.offset(last.num_blocks, 0, 0, 0)) * kernels::kv_elem_bytes(dtype);
      const size_t num_scales =
          size_t(last.num_blocks) * 2 * size_t(last.num_kv_heads) * bs * size_t(last.num_scale_groups());
      std::memset(last.data, 0, data_bytes);  // the bytes no step writes compare equal too
      if (last.scales != nullptr) std::fill_n(last.scales, num_scales, 0.0f);
      std::vector<cache::BlockTable> t = m.reserve(kv);
      const int saved = f.model.max_pass_tokens();
      f.model.set_max_pass_tokens(0);
      std::vector<float> logits(size_t(m.na + m.nb) * cfg.vocab_size);
      f.model.forward(m.earlier(t), kv, logits.data());
      engine::ScheduledBatch s = m.step(t);
      const std::vector<int32_t> wanted = s.logits_rows;
      REQUIRE(wanted.size() == 3);
      if (all_rows) {
        s.logits_rows.resize(size_t(s.num_tokens()));
        for (int r = 0; r < s.num_tokens(); ++r) s.logits_rows[size_t(r)] = r;
      }
      f.model.forward(s, kv, logits.data());
      std::vector<float> out;
      for (size_t i = 0; i < wanted.size(); ++i) {
        const size_t row = all_rows ? size_t(wanted[i]) : i;
        out.insert(out.end(), &logits[row * cfg.vocab_size], &logits[(row + 1) * cfg.vocab_size]);
      }
      // A generation step after it reads every row's K/V of the pruned layer.
      const int32_t next = 7;
      engine::ScheduledBatch after;
      after.add_sequence(&next, 1, m.na, t[0].blocks().data(), t[0].num_blocks(), bs, true);
      f.model.forward(after, kv, logits.data());
      out.insert(out.end(), &logits[0], &logits[cfg.vocab_size]);
      const auto* bytes = static_cast<const uint8_t*>(last.data);
      cache_bytes->assign(bytes, bytes + data_bytes);
      if (last.scales != nullptr) {
        const auto* sb = reinterpret_cast<const uint8_t*>(last.scales);
        cache_bytes->insert(cache_bytes->end(), sb, sb + num_scales * sizeof(float));
      }
      f.model.set_max_pass_tokens(saved);
      for (auto& table : t) table.release(kv.pool());
      return out;
    };
    for (const kernels::KvDType dtype : {kernels::KvDType::F32, kernels::KvDType::F16, kernels::KvDType::Int8}) {
      CAPTURE(int(dtype));
      std::vector<uint8_t> pruned_cache, full_cache;
      const std::vector<float> pruned = run(dtype, false, &pruned_cache), full = run(dtype, true, &full_cache);
      REQUIRE(pruned.size() == size_t(4) * cfg.vocab_size);
      CHECK(std::memcmp(pruned.data(), full.data(), pruned.size() * sizeof(float)) == 0);
      CHECK(pruned_cache == full_cache);
      CHECK(!pruned_cache.empty());
    }
  }
}

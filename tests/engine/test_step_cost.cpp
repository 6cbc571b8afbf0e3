// The step cost model: the shape of a packed batch, the test hook's parser, and the online estimator
// converging on synthetic step timings with noise and outliers (a step that another process preempted).
#include <doctest/doctest.h>

#include <cmath>
#include <iterator>
#include <random>
#include <stdexcept>

#include "engine/batch.h"
#include "engine/step_cost.h"

using namespace inflight;
using engine::StepCost;
using engine::StepCostModel;
using engine::StepShape;

namespace {

// A mixed load's steps: decode-only ones (1-32 streams, contexts up to 1500) and, one in four, a prompt
// chunk beside them.
StepShape random_shape(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> streams(1, 32), context(10, 1500), chunk(16, 512), coin(0, 3);
  StepShape s;
  s.num_decode_seqs = streams(rng);
  for (int i = 0; i < s.num_decode_seqs; ++i) s.attention_kpairs += engine::attention_kpairs(context(rng), 1);
  if (coin(rng) == 0) {
    s.num_prefill_tokens = chunk(rng);
    s.attention_kpairs += engine::attention_kpairs(context(rng), s.num_prefill_tokens);
  }
  return s;
}

// |got - want| / want.
double rel_err(double got, double want) { return std::fabs(got - want) / want; }

}  // namespace

TEST_SUITE("step cost") {
  TEST_CASE("step_shape: context sequences are prompt tokens, the others decode; causal query-key pairs") {
    engine::ScheduledBatch b;
    const int32_t blocks[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    b.add_sequence(std::vector<int32_t>(10, 5).data(), 10, 20, blocks, 8, 16, true);  // a chunk after 20 cached
    b.add_sequence(std::vector<int32_t>(1, 5).data(), 1, 99, blocks, 8, 16, true);    // decoding at 99
    b.num_context_seqs = 1;
    const StepShape s = engine::step_shape(b);
    CHECK(s.num_prefill_tokens == 10);
    CHECK(s.num_decode_seqs == 1);
    CHECK(s.attention_kpairs == doctest::Approx((10 * (20 + 5.5) + 1 * (99 + 1)) / 1000.0));
  }

  TEST_CASE("parse_step_cost: four numbers >= 0 in ms, else an error naming the field") {
    const StepCost c = engine::parse_step_cost("2,0.05,1,0.01");
    CHECK(c.fixed_ms == 2.0);
    CHECK(c.prefill_token_ms == 0.05);
    CHECK(c.decode_seq_ms == 1.0);
    CHECK(c.attention_kpair_ms == 0.01);
    for (const char* bad : {"", "1,2,3", "1,2,3,4,5", "1,x,3,4", "1,-2,3,4", "1,2,3,nan", "1,2 ,3,4"}) {
      CAPTURE(bad);
      CHECK_THROWS_AS(engine::parse_step_cost(bad), std::invalid_argument);
    }
  }

  TEST_CASE("the estimator converges on noisy timings with 10% outliers, and predicts unseen steps") {
    const StepCost truth{6.0, 1.5, 2.2, 0.07};
    StepCostModel model;
    std::mt19937_64 rng(17);
    std::normal_distribution<double> noise(0.0, 0.03);
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    for (int i = 0; i < 400; ++i) {
      const StepShape s = random_shape(rng);
      double ms = truth.predict_ms(s) * (1.0 + noise(rng));
      if (unit(rng) < 0.1) ms *= 3.0;  // preempted by another process
      model.observe(s, ms);
    }
    const StepCost c = model.cost();
    MESSAGE("fixed " << c.fixed_ms << ", prompt token " << c.prefill_token_ms << ", decode seq " << c.decode_seq_ms
                     << ", kpair " << c.attention_kpair_ms);
    // The per-token and per-sequence costs carry most of a step; attention's share of a step is small,
    // so its coefficient is the loosest.
    CHECK(rel_err(c.prefill_token_ms, truth.prefill_token_ms) < 0.05);
    CHECK(rel_err(c.decode_seq_ms, truth.decode_seq_ms) < 0.10);
    CHECK(rel_err(c.fixed_ms, truth.fixed_ms) < 0.25);
    CHECK(rel_err(c.attention_kpair_ms, truth.attention_kpair_ms) < 0.75);
    double worst = 0;
    for (int i = 0; i < 200; ++i) {
      const StepShape s = random_shape(rng);
      worst = std::max(worst, rel_err(c.predict_ms(s), truth.predict_ms(s)));
    }
    MESSAGE("worst relative error of 200 predictions: " << worst);
    CHECK(worst < 0.05);
    CHECK(model.num_observed() == 400);
  }

  TEST_CASE("the estimator follows a machine that gets slower, and the same timings give the same cost") {
    StepCostModel a, b;
    std::mt19937_64 rng(3);
    for (double factor : {1.0, 2.0})
      for (int i = 0; i < 300; ++i) {
        const StepShape s = random_shape(rng);
        const double ms = StepCost{4.0 * factor, 1.0 * factor, 2.0 * factor, 0.05 * factor}.predict_ms(s);
        a.observe(s, ms);
        b.observe(s, ms);
      }
    CHECK(rel_err(a.cost().prefill_token_ms, 2.0) < 0.02);
    CHECK(rel_err(a.cost().decode_seq_ms, 4.0) < 0.02);
    CHECK(a.cost().fixed_ms == b.cost().fixed_ms);
    CHECK(a.cost().prefill_token_ms == b.cost().prefill_token_ms);
    CHECK(a.cost().decode_seq_ms == b.cost().decode_seq_ms);
    CHECK(a.cost().attention_kpair_ms == b.cost().attention_kpair_ms);
  }

  TEST_CASE("past its window the estimator refits every 8th step, and at once for the first step of a kind") {
    StepCostModel model(16);
    for (int i = 0; i < 16; ++i) model.observe({0, 1 + i % 4, 0.0}, 2.0 + 1.0 * (1 + i % 4));
    const StepCost before = model.cost();
    for (int i = 0; i < 7; ++i) {  // observations 17 .. 23: no refit
      model.observe({0, 1 + i % 4, 0.0}, 4.0 + 2.0 * (1 + i % 4));
      CHECK(model.cost().decode_seq_ms == before.decode_seq_ms);
    }
    model.observe({0, 2, 0.0}, 8.0);  // the 24th
    CHECK(model.cost().decode_seq_ms > before.decode_seq_ms);
    const double decode_seq_ms = model.cost().decode_seq_ms;
    model.observe({50, 2, 1.0}, 30.0);  // the first prompt chunk refits, though it is the 25th
    CHECK(model.cost().prefill_token_ms != decode_seq_ms);
  }

  TEST_CASE("before any prompt chunk is measured, a prompt token costs what a decoding sequence does") {
    StepCostModel model;
    CHECK(!model.cost().known());
    std::mt19937_64 rng(5);
    for (int i = 0; i < 40; ++i) {
      StepShape s = random_shape(rng);
      s.num_prefill_tokens = 0;
      model.observe(s, 3.0 + 2.0 * s.num_decode_seqs);
    }
    CHECK(model.cost().known());
    CHECK(model.cost().decode_seq_ms > 1.5);
    CHECK(model.cost().prefill_token_ms == model.cost().decode_seq_ms);
    // Decode-only steps never push the prompt steps out: a window is kept for each kind.
    StepCostModel mixed(8);
    for (int i = 0; i < 8; ++i) mixed.observe({100, 4, 0.0}, 10.0 + 100 * 0.5 + 4 * 2.0);
    for (int i = 0; i < 200; ++i) mixed.observe({0, 1 + i % 8, 0.0}, 10.0 + (1 + i % 8) * 2.0);
    CHECK(rel_err(mixed.cost().prefill_token_ms, 0.5) < 0.02);
    CHECK(rel_err(mixed.cost().decode_seq_ms, 2.0) < 0.02);
  }

  TEST_CASE("the non-negative fit is the optimum, not the end of dropping the most negative coefficient") {
    // Timings where the least-squares fit has negative coefficients and dropping the most negative one
    // first ends on {prompt token, decoding sequence} (0.063, 8.55); the best non-negative fit keeps the
    // fixed cost instead (about 10 ms per step, 5 % less squared error).
    const StepShape shapes[] = {{0, 1, 0.303}, {4, 1, 1.014}, {4, 1, 0.643}, {80, 1, 29.246}, {0, 1, 0.294}, {0, 1, 0.370},
                                {80, 1, 27.468}, {80, 0, 4.140}, {0, 1, 0.345}, {0, 1, 0.267}, {0, 1, 0.408}, {0, 1, 0.111}};
    const double ms[] = {9.904, 12.38, 9.69, 6.764, 6.266, 11.804, 7.641, 17.708, 5.632, 8.064, 8.65, 17.915};
    StepCostModel model;
    for (size_t i = 0; i < std::size(ms); ++i) model.observe(shapes[i], ms[i]);
    const StepCost c = model.cost();
    CHECK(c.fixed_ms > 5.0);
    CHECK(c.decode_seq_ms < 1.0);
  }

  TEST_CASE("coefficients never go negative, and bad timings are ignored") {
    StepCostModel model;
    for (int i = 0; i < 50; ++i) model.observe({i % 2 == 0 ? 0 : 64, 8, 1.0}, 5.0);  // prompt tokens cost nothing
    model.observe({64, 8, 1.0}, NAN);
    model.observe({64, 8, 1.0}, -1.0);
    CHECK(model.num_observed() == 50);
    const StepCost c = model.cost();
    CHECK(c.fixed_ms >= 0);
    CHECK(c.prefill_token_ms >= 0);
    CHECK(c.decode_seq_ms >= 0);
    CHECK(c.attention_kpair_ms >= 0);
    CHECK(rel_err(c.predict_ms({64, 8, 1.0}), 5.0) < 0.01);
  }
}

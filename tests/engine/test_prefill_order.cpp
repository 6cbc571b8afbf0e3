// The short-first plan on its own: the shortest remaining prompt first, the oldest prompt's minimum chunk
// set aside before anyone else is served (and the shortest one's given), the sequence and admission limits,
// the KV test's may_pass.
#include <doctest/doctest.h>

#include <vector>

#include "engine/prefill_order.h"

using namespace inflight;
using engine::PrefillBudget;
using engine::PrefillCandidate;
using engine::plan_short_first;

namespace {

// ms: 0.125 per prompt token (8 tokens a ms, exact in binary), nothing else.
constexpr engine::StepCost kPerToken{0.0, 0.125, 0.0, 0.0};

}  // namespace

TEST_SUITE("prefill_order") {
  TEST_CASE("names: fcfs and short-first parse back; anything else is refused") {
    engine::PrefillOrder o{};
    CHECK(engine::parse_prefill_order("short-first", &o));
    CHECK(o == engine::PrefillOrder::kShortFirst);
    CHECK(engine::parse_prefill_order("fcfs", &o));
    CHECK(o == engine::PrefillOrder::kFcfs);
    CHECK_FALSE(engine::parse_prefill_order("sjf", &o));
    CHECK_FALSE(engine::parse_prefill_order("", &o));
    CHECK(engine::prefill_order_names() == "fcfs, short-first");
  }

  TEST_CASE("the shortest remaining prompt first, ties oldest first, the oldest keeping its minimum chunk") {
    // Oldest first: a long running prompt, then waiting prompts of 64, 20 and 20 tokens.
    const std::vector<PrefillCandidate> c = {{500, 1000, false}, {0, 64, true}, {0, 20, true}, {0, 20, true}};
    // 15 ms: 120 tokens. The oldest's 32 are set aside: 20 + 20 + 48 of the 64, then the oldest gets 32.
    const auto p = plan_short_first(c, {.num_tokens = 2048, .num_seqs = 8, .num_admissions = 8, .timed = true,
                                        .ms = 15.0, .min_chunk = 32},
                                    kPerToken);
    CHECK(p.num_tokens == std::vector<int>{32, 48, 20, 20});
    CHECK(p.order == std::vector<int>{2, 3, 1, 0});
    // Without a time budget the token budget is shared the same way.
    const auto t = plan_short_first(c, {.num_tokens = 100, .num_seqs = 8, .num_admissions = 8, .min_chunk = 32},
                                    kPerToken);
    CHECK(t.num_tokens == std::vector<int>{32, 28, 20, 20});
  }

  TEST_CASE("with (almost) no time left the oldest and the shortest prompt still get the minimum chunk, no one else") {
    const std::vector<PrefillCandidate> c = {{0, 1000, false}, {0, 50, true}, {0, 60, true}};
    // 10 ms: 80 tokens; 32 set aside for the oldest, 48 for the shortest, nothing for the 60-token one.
    const auto p = plan_short_first(c, {.num_tokens = 2048, .num_seqs = 8, .num_admissions = 8, .timed = true,
                                        .ms = 10.0, .min_chunk = 32},
                                    kPerToken);
    CHECK(p.num_tokens == std::vector<int>{32, 48, 0});
    // 6.25 ms: 50 tokens, 18 of them for the shortest, lifted to the minimum chunk.
    const auto little = plan_short_first(c, {.num_tokens = 2048, .num_seqs = 8, .num_admissions = 8, .timed = true,
                                             .ms = 6.25, .min_chunk = 32},
                                         kPerToken);
    CHECK(little.num_tokens == std::vector<int>{32, 32, 0});
    const auto none = plan_short_first(c, {.num_tokens = 2048, .num_seqs = 8, .num_admissions = 8, .timed = true,
                                           .ms = -3.0, .min_chunk = 32},
                                       kPerToken);
    CHECK(none.num_tokens == std::vector<int>{32, 32, 0});
    CHECK(none.order == std::vector<int>{1, 0});
  }

  TEST_CASE("the sequence and admission limits keep a place for the oldest prompt") {
    const std::vector<PrefillCandidate> c = {{0, 300, true}, {0, 10, true}, {0, 10, true}};
    const auto one_admission = plan_short_first(c, {.num_tokens = 2048, .num_seqs = 8, .num_admissions = 1,
                                                    .min_chunk = 32},
                                                kPerToken);
    CHECK(one_admission.num_tokens == std::vector<int>{300, 0, 0});
    const auto two_seqs = plan_short_first(c, {.num_tokens = 2048, .num_seqs = 2, .num_admissions = 8,
                                               .min_chunk = 32},
                                           kPerToken);
    CHECK(two_seqs.num_tokens == std::vector<int>{300, 10, 0});
  }

  TEST_CASE("a waiting prompt that may not pass waits until every older prompt is planned whole") {
    std::vector<PrefillCandidate> c = {{0, 200, false}, {0, 20, true, false}};
    const PrefillBudget b{.num_tokens = 64, .num_seqs = 8, .num_admissions = 8, .min_chunk = 32};
    CHECK(plan_short_first(c, b, kPerToken).num_tokens == std::vector<int>{64, 0});
    c[1].may_pass = true;
    CHECK(plan_short_first(c, b, kPerToken).num_tokens == std::vector<int>{44, 20});
    // The older prompt's last chunk comes first (it is shorter): then the waiting one passes nobody.
    c = {{192, 8, false}, {0, 20, true, false}};
    CHECK(plan_short_first(c, b, kPerToken).num_tokens == std::vector<int>{8, 20});
  }
}

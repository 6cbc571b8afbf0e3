#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "engine/sampler.h"

using namespace inflight::engine;

TEST_SUITE("sampler") {
  TEST_CASE("greedy picks the first maximal logit") {
    std::vector<float> logits{0.5f, 2.0f, 2.0f, -1.0f};
    Sampler s({.temperature = 0.0f});
    CHECK(s.sample(logits, {}, {}) == 1);
  }

  TEST_CASE("same seed, same tokens; another seed, other tokens") {
    std::vector<float> base(64);
    for (size_t i = 0; i < base.size(); ++i) base[i] = float(i % 7) * 0.3f;
    auto draw = [&](uint64_t seed) {
      Sampler s({.temperature = 1.0f, .seed = seed});
      std::vector<int32_t> out;
      for (int i = 0; i < 50; ++i) {
        std::vector<float> l = base;
        out.push_back(s.sample(l, {}, {}));
      }
      return out;
    };
    CHECK(draw(42) == draw(42));
    CHECK(draw(42) != draw(43));
  }

  TEST_CASE("top-k 1 and a tiny top-p are greedy; min-p drops unlikely tokens") {
    const std::vector<float> base{1.0f, 3.0f, 2.9f, 0.0f};
    for (SamplingParams p : {SamplingParams{.top_k = 1, .seed = 1}, SamplingParams{.top_p = 0.01f, .seed = 1}}) {
      Sampler s(p);
      for (int i = 0; i < 20; ++i) {
        std::vector<float> l = base;
        CHECK(s.sample(l, {}, {}) == 1);
      }
    }
    // p(1) ~ 0.50, p(2) ~ 0.45, p(0) ~ 0.07, p(3) ~ 0.02: min_p 0.2 keeps only ids 1 and 2.
    Sampler s({.min_p = 0.2f, .seed = 7});
    std::map<int32_t, int> seen;
    for (int i = 0; i < 400; ++i) {
      std::vector<float> l = base;
      ++seen[s.sample(l, {}, {})];
    }
    CHECK(seen.count(0) == 0);
    CHECK(seen.count(3) == 0);
    CHECK(seen[1] > 100);
    CHECK(seen[2] > 100);
  }

  TEST_CASE("with no filter the draws follow the softmax of logits / temperature") {
    // Weights 1 : 2 : 3 : 4 at temperature 0.5 (logits halved back), in shuffled ids.
    const std::vector<float> logits{0.5f * std::log(3.0f), 0.5f * std::log(1.0f), 0.5f * std::log(4.0f),
                                    0.5f * std::log(2.0f)};
    Sampler s({.temperature = 0.5f, .seed = 11});
    std::map<int32_t, int> seen;
    const int n = 20000;
    for (int i = 0; i < n; ++i) ++seen[s.sample(logits, {}, {})];
    CHECK(double(seen[1]) / n == doctest::Approx(0.1).epsilon(0.1));
    CHECK(double(seen[3]) / n == doctest::Approx(0.2).epsilon(0.1));
    CHECK(double(seen[0]) / n == doctest::Approx(0.3).epsilon(0.1));
    CHECK(double(seen[2]) / n == doctest::Approx(0.4).epsilon(0.1));
  }

  TEST_CASE("top-p over a wide flat vocabulary keeps exactly the smallest prefix that reaches it") {
    // 5000 logits falling slowly with the id, so the prefix holds about 1500 of them: past several of the
    // sampler's sorting steps (64, 512, 4096 candidates), in shuffled order.
    const int vocab = 5000;
    std::vector<int32_t> order(vocab);
    for (int i = 0; i < vocab; ++i) order[size_t(i)] = int32_t((int64_t(i) * 2654435761u) % vocab);
    std::vector<float> logits(vocab);
    for (int i = 0; i < vocab; ++i) logits[size_t(order[size_t(i)])] = -0.0004f * float(i);
    // The prefix by brute force: candidates by logit, weights e^(l - max), summed until top_p of the total.
    const float top_p = 0.4f;
    double total = 0.0;
    for (int i = 0; i < vocab; ++i) total += std::exp(-0.0004f * float(i));
    double cum = 0.0;
    int keep = 0;
    while (keep < vocab) {
      cum += std::exp(-0.0004f * float(keep)) / total;
      ++keep;
      if (cum >= top_p) break;
    }
    REQUIRE(keep > 600);
    REQUIRE(keep < 4000);
    std::vector<int> rank(vocab);
    for (int i = 0; i < vocab; ++i) rank[size_t(order[size_t(i)])] = i;
    Sampler s({.top_p = top_p, .seed = 5});
    int deepest = 0;
    for (int i = 0; i < 4000; ++i) {
      const int r = rank[size_t(s.sample(logits, {}, {}))];
      CHECK(r < keep);
      deepest = std::max(deepest, r);
    }
    CHECK(deepest >= keep - 20);  // the prefix's last candidates are drawn too
  }

  TEST_CASE("top-k 2 samples only the two best") {
    Sampler s({.top_k = 2, .seed = 3});
    std::map<int32_t, int> seen;
    for (int i = 0; i < 300; ++i) {
      std::vector<float> l{1.0f, 1.1f, 0.9f, 1.05f};
      ++seen[s.sample(l, {}, {})];
    }
    CHECK(seen.size() == 2);
    CHECK(seen.count(1) == 1);
    CHECK(seen.count(3) == 1);
  }

  TEST_CASE("penalties follow vLLM: repetition over prompt and output, presence/frequency over output") {
    std::vector<int32_t> counts;
    std::vector<float> l{2.0f, -2.0f, 2.0f, 2.0f};
    apply_penalties({.repetition_penalty = 2.0f}, l, std::vector<int32_t>{0, 1}, std::vector<int32_t>{2, 2}, counts);
    CHECK(l == std::vector<float>{1.0f, -4.0f, 1.0f, 2.0f});
    l = {1.0f, 1.0f, 1.0f, 1.0f};
    apply_penalties({.presence_penalty = 0.5f, .frequency_penalty = 0.25f}, l, std::vector<int32_t>{3},
                    std::vector<int32_t>{0, 0, 1}, counts);
    CHECK(l == std::vector<float>{1.0f - 0.5f - 0.5f, 1.0f - 0.5f - 0.25f, 1.0f, 1.0f});
  }

  TEST_CASE("a sampler's penalties steer its pick but leave the row it was given as it was") {
    const std::vector<float> row{2.0f, 1.9f, 0.5f, -1.0f};
    Sampler plain({.temperature = 0.0f});
    Sampler penalized({.temperature = 0.0f, .repetition_penalty = 2.0f});
    const std::vector<int32_t> prompt{0};
    CHECK(penalized.sample(row, prompt, {}) == 1);  // token 0's logit halves to 1.0
    CHECK(row == std::vector<float>{2.0f, 1.9f, 0.5f, -1.0f});
    CHECK(plain.sample(row, prompt, {}) == 0);  // the same row serves the next sampler unchanged
    Sampler frequency({.temperature = 0.0f, .frequency_penalty = 0.2f});
    CHECK(frequency.sample(row, {}, std::vector<int32_t>{0}) == 1);
    CHECK(row[0] == 2.0f);
  }

  TEST_CASE("validation names the field") {
    CHECK(validate(SamplingParams{}).empty());
    CHECK(validate(SamplingParams{.temperature = -1.0f}).find("temperature") != std::string::npos);
    CHECK(validate(SamplingParams{.top_p = 0.0f}).find("top_p") != std::string::npos);
    CHECK(validate(SamplingParams{.min_p = 1.5f}).find("min_p") != std::string::npos);
    CHECK(validate(SamplingParams{.repetition_penalty = 0.0f}).find("repetition_penalty") != std::string::npos);
    CHECK(validate(SamplingParams{.presence_penalty = 3.0f}).find("presence_penalty") != std::string::npos);
  }
}

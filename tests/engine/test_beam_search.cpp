// Beam search in the engine (shared prompt blocks, per-beam blocks, cache indirection) against an
// independent brute-force beam search here: every beam a separate sequence with its own full KV,
// recomputed from scratch at every step.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>

#include "engine/model_loader.h"
#include "engine_support.h"
#include "test_support.h"

using namespace inflight;

namespace {

struct Hyp {
  std::vector<int32_t> tokens;
  double cum = 0, score = 0;
  bool by_text = false;  // ended by reaching the stop string
};

class BruteForce {
 public:
  BruteForce(engine::Model& model) : model_(model) {}

  std::vector<float> log_probs(const std::vector<int32_t>& tokens) {
    const auto& c = model_.config();
    const int bs = 16, nb = int(tokens.size() + bs - 1) / bs;
    cache::KvCache kv({c.num_layers, c.num_kv_heads, c.head_dim, bs, nb, kernels::KvDType::F32});
    std::vector<int32_t> blocks(static_cast<size_t>(nb));
    for (int i = 0; i < nb; ++i) blocks[size_t(i)] = i;
    engine::ScheduledBatch b;
    b.add_sequence(tokens.data(), int(tokens.size()), 0, blocks.data(), nb, bs, true);
    b.num_context_seqs = 1;
    std::vector<float> logits(size_t(c.vocab_size));
    model_.forward(b, kv, logits.data());
    const float m = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (float l : logits) sum += std::exp(double(l - m));
    for (float& l : logits) l = l - m - float(std::log(sum));
    return logits;
  }

  // `stop` (optional, with `text` giving the text of generated tokens): a beam whose text holds it ends.
  std::vector<Hyp> run(const std::vector<int32_t>& prompt, int width, int max_tokens, float lp, bool early, int n,
                       int32_t eos, const std::string& stop = {},
                       const std::function<std::string(const std::vector<int32_t>&)>& text = {}) {
    const int P = int(prompt.size());
    auto score = [&](double cum, int len) { return cum / std::pow(double(P + len), double(lp)); };
    std::vector<Hyp> live{Hyp{}}, finished;
    for (int step = 0; step < max_tokens; ++step) {
      struct Cand {
        double cum;
        int parent;
        int32_t token;
      };
      std::vector<Cand> cands;
      for (int b = 0; b < int(live.size()); ++b) {
        std::vector<int32_t> all = prompt;
        all.insert(all.end(), live[size_t(b)].tokens.begin(), live[size_t(b)].tokens.end());
        const std::vector<float> lps = log_probs(all);
        for (int32_t t = 0; t < int32_t(lps.size()); ++t) cands.push_back({live[size_t(b)].cum + lps[size_t(t)], b, t});
      }
      std::sort(cands.begin(), cands.end(), [](const Cand& a, const Cand& b) {
        return a.cum != b.cum ? a.cum > b.cum : a.parent != b.parent ? a.parent < b.parent : a.token < b.token;
      });
      std::vector<Hyp> next;
      for (int rank = 0; rank < 2 * width && int(next.size()) < width; ++rank) {
        const Cand& c = cands[size_t(rank)];
        Hyp h{live[size_t(c.parent)].tokens, c.cum, 0};
        h.tokens.push_back(c.token);
        h.by_text = c.token != eos && !stop.empty() && text(h.tokens).find(stop) != std::string::npos;
        if (c.token == eos || h.by_text) {
          if (rank >= width) continue;
          h.score = score(c.cum, h.by_text ? step + 1 : step);
          finished.push_back(h);
          std::stable_sort(finished.begin(), finished.end(), [](auto& a, auto& b) { return a.score > b.score; });
          if (int(finished.size()) > width) finished.resize(size_t(width));
        } else {
          next.push_back(h);
        }
      }
      bool done = step + 1 >= max_tokens || next.empty();
      if (int(finished.size()) >= width) {
        if (early) done = true;
        else if (!next.empty() && finished.back().score >= score(next[0].cum, step + 1)) done = true;
      }
      if (done) {
        for (Hyp& h : next) {
          h.score = score(h.cum, step + 1);
          finished.push_back(h);
        }
        break;
      }
      live = next;
    }
    std::stable_sort(finished.begin(), finished.end(), [](auto& a, auto& b) { return a.score > b.score; });
    if (int(finished.size()) > n) finished.resize(size_t(n));
    return finished;
  }

 private:
  engine::Model& model_;
};

}  // namespace

TEST_SUITE("beam_search") {
  TEST_CASE("engine beam search equals a brute-force beam search, widths 2 and 4, within its KV bound") {
    engine::LoadedModel loaded = engine::load_model(test::stories_gguf());
    engine::Model model(std::move(loaded.weights));
    const auto& c = model.config();
    BruteForce brute(model);
    const int bs = 4, num_blocks = 256;
    cache::KvCache kv({c.num_layers, c.num_kv_heads, c.head_dim, bs, num_blocks, kernels::KvDType::F32});

    struct Case {
      const char* prompt;
      int width, n, max_tokens;
      float length_penalty;
      bool early;
    };
    for (const Case& k : {Case{"Once upon a time", 2, 2, 24, 1.0f, false}, Case{"The cat", 4, 3, 20, 0.6f, false},
                          Case{"Lily and Tom went to the park", 4, 4, 16, 1.0f, true}}) {
      const std::string prompt_text = k.prompt;
      CAPTURE(prompt_text);
      CAPTURE(k.width);
      const std::vector<int32_t> prompt = loaded.tokenizer.encode(k.prompt, true);
      const std::vector<Hyp> want = brute.run(prompt, k.width, k.max_tokens, k.length_penalty, k.early, k.n, c.eos_id);

      engine::Engine eng(model, loaded.tokenizer, kv, {.enable_prefix_caching = false});
      engine::Request r;
      r.prompt_ids = prompt;
      r.beam_width = k.width;
      r.n = k.n;
      r.length_penalty = k.length_penalty;
      r.early_stopping = k.early;
      r.stop.max_tokens = k.max_tokens;
      test::Collector col;
      eng.submit(col.attach(r));
      const test::Outcome o = col.wait();
      const engine::EngineStats stats = eng.stats();
      eng.shutdown();

      REQUIRE(o.choices.size() == want.size());
      for (size_t i = 0; i < want.size(); ++i) {
        CAPTURE(i);
        CHECK(o.choices.at(int(i)).tokens == want[i].tokens);
        CHECK(o.choices.at(int(i)).cumulative_logprob == doctest::Approx(want[i].cum).epsilon(1e-4));
      }
      const int prompt_blocks = int(prompt.size() + bs - 1) / bs;
      const int gen_blocks = (k.max_tokens + bs - 1) / bs;
      MESSAGE("width " << k.width << ": peak " << stats.kv_blocks_peak << " blocks; bound "
                       << prompt_blocks + k.width * (gen_blocks + 1) << "; separate copies would take "
                       << k.width * (prompt_blocks + gen_blocks));
      CHECK(stats.kv_blocks_peak <= prompt_blocks + k.width * (gen_blocks + 1));
      CHECK(kv.pool().num_free() == num_blocks);
      MESSAGE("best: " << o.choices.at(0).text);
    }
  }

  TEST_CASE("engine beam search ends beams at stop strings like the brute-force search") {
    engine::LoadedModel loaded = engine::load_model(test::stories_gguf());
    engine::Model model(std::move(loaded.weights));
    const auto& c = model.config();
    BruteForce brute(model);
    cache::KvCache kv({c.num_layers, c.num_kv_heads, c.head_dim, 4, 256, kernels::KvDType::F32});
    const std::vector<int32_t> prompt = loaded.tokenizer.encode("Once upon a time", true);
    const size_t prompt_chars = loaded.tokenizer.decode(prompt).size();
    auto text = [&](const std::vector<int32_t>& gen) {
      std::vector<int32_t> all = prompt;
      all.insert(all.end(), gen.begin(), gen.end());
      return loaded.tokenizer.decode(all).substr(prompt_chars);
    };
    const int width = 3, max_tokens = 24;
    // A stop string from the middle of the best hypothesis without one, so that beams do reach it.
    const std::vector<Hyp> free_run = brute.run(prompt, width, max_tokens, 1.0f, false, 1, c.eos_id);
    const std::string free_text = text(free_run.at(0).tokens);
    REQUIRE(free_text.size() > 20);
    const std::string stop = free_text.substr(free_text.size() / 2, 3);
    CAPTURE(free_text);
    CAPTURE(stop);
    const std::vector<Hyp> want = brute.run(prompt, width, max_tokens, 1.0f, false, width, c.eos_id, stop, text);

    engine::Engine eng(model, loaded.tokenizer, kv, {.enable_prefix_caching = false});
    engine::Request r;
    r.prompt_ids = prompt;
    r.beam_width = width;
    r.n = width;
    r.stop.max_tokens = max_tokens;
    r.stop.stop = {stop};
    test::Collector col;
    eng.submit(col.attach(r));
    const test::Outcome o = col.wait();
    eng.shutdown();

    REQUIRE(o.choices.size() == want.size());
    int by_text = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      CAPTURE(i);
      const test::Choice& got = o.choices.at(int(i));
      CHECK(got.tokens == want[i].tokens);
      CHECK(got.cumulative_logprob == doctest::Approx(want[i].cum).epsilon(1e-4));
      const bool by_eos = !want[i].by_text && want[i].tokens.back() == c.eos_id;
      std::string want_text = text({want[i].tokens.begin(), want[i].tokens.end() - (by_eos ? 1 : 0)});
      if (want[i].by_text) want_text.resize(want_text.find(stop));
      CHECK(got.text == want_text);
      CHECK(got.text.find(stop) == std::string::npos);
      CHECK(got.reason == (want[i].by_text || by_eos ? engine::FinishReason::Stop : engine::FinishReason::Length));
      by_text += want[i].by_text;
    }
    CHECK(by_text > 0);  // the stop string did end a returned hypothesis
    CHECK(kv.pool().num_free() == 256);
  }
}

// Beam search in the engine (shared prompt blocks, per-beam blocks, cache indirection) against an
// independent brute-force beam search here: every beam a separate sequence with its own full KV,
// recomputed from scratch at every step.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "engine/model_loader.h"
#include "engine_support.h"
#include "test_support.h"

using namespace inflight;

namespace {

struct Hyp {
  std::vector<int32_t> tokens;
  double cum = 0, score = 0;
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

  std::vector<Hyp> run(const std::vector<int32_t>& prompt, int width, int max_tokens, float lp, bool early, int n,
                       int32_t eos) {
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
        if (c.token == eos) {
          if (rank >= width) continue;
          h.score = score(c.cum, step);
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
}

// Running requests through an Engine in tests: collects each request's events and waits for the end.
#pragma once
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "test_support.h"

namespace inflight::test {

// llama2.c's greedy outputs of stories260K: tests/data/golden/stories260K_greedy.json, or the file named by
// INFLIGHT_STORIES_GOLDEN.
inline nlohmann::json load_stories_golden() {
  const char* env = std::getenv("INFLIGHT_STORIES_GOLDEN");
  const std::string path = env ? env : (data_dir() / "golden" / "stories260K_greedy.json").string();
  std::ifstream f(path);
  REQUIRE_MESSAGE(f.good(), "cannot open golden file " << path);
  return nlohmann::json::parse(f);
}

// The engine tests' prompts for stories260K (one empty, one of two blocks and more).
inline constexpr const char* kStoryPrompts[] = {
    "Once upon a time",
    "Lily and Tom went to the park",
    "The cat",
    "",
    "One day, a little girl named Sue found a big red ball in the garden. She",
    "Tom had a dog",
    "The sun was shining and the birds were singing. Ben wanted to go outside and play with his friends",
    "A fox"};

// Greedy, exactly max_tokens tokens (EOS ignored).
inline engine::Request greedy_request(const std::vector<int32_t>& prompt, int max_tokens) {
  engine::Request r;
  r.prompt_ids = prompt;
  r.sampling.temperature = 0.0f;
  r.stop.max_tokens = max_tokens;
  r.stop.ignore_eos = true;
  return r;
}

struct Choice {
  std::vector<int32_t> tokens;
  std::string text;
  engine::FinishReason reason = engine::FinishReason::Error;
  bool finished = false;
  std::vector<float> logprobs;
  double cumulative_logprob = 0;
};

struct Outcome {
  std::map<int, Choice> choices;
  engine::Usage usage;
  std::string error;
  bool done = false;
  int num_events_after_last = 0;
};

// Thread-safe event sink + waiter for one request.
class Collector {
 public:
  engine::Request attach(engine::Request r) {
    auto self = state_;
    r.sink = [self](const engine::Event& ev) {
      std::lock_guard<std::mutex> lock(self->mu);
      Outcome& o = self->outcome;
      if (o.done) ++o.num_events_after_last;
      if (auto* t = std::get_if<engine::TokenEvent>(&ev.value)) {
        Choice& c = o.choices[t->index];
        c.tokens.push_back(t->token_id);
        c.text += t->text;
        c.logprobs.push_back(t->logprob);
      } else if (auto* f = std::get_if<engine::FinishedEvent>(&ev.value)) {
        Choice& c = o.choices[f->index];
        if (!f->token_ids.empty() || c.tokens.empty()) c.tokens = f->token_ids;
        c.text += f->text;
        c.reason = f->reason;
        c.finished = true;
        c.cumulative_logprob = f->cumulative_logprob;
        o.usage = f->usage;
      } else if (auto* e = std::get_if<engine::ErrorEvent>(&ev.value)) {
        o.error = e->message;
      }
      if (ev.last) {
        o.done = true;
        self->cv.notify_all();
      }
    };
    return r;
  }
  Outcome wait() {
    std::unique_lock<std::mutex> lock(state_->mu);
    state_->cv.wait(lock, [&] { return state_->outcome.done; });
    return state_->outcome;
  }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    Outcome outcome;
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

}  // namespace inflight::test

// Running requests through an Engine in tests: collects each request's events and waits for the end.
#pragma once
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace inflight::test {

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

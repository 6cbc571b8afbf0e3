// engine::Request and the events it produces: everything that crosses from server/ into engine/.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "engine/sampler.h"

namespace inflight::engine {

namespace grammar {
class Grammar;
}

struct StopConditions {
  int max_tokens = 16;                  // generated tokens, >= 1
  int min_tokens = 0;                   // EOS and stop token ids are ignored before this many tokens
  bool ignore_eos = false;
  std::vector<std::string> stop;        // stop strings; the text never contains them
  std::vector<int32_t> stop_token_ids;  // besides EOS
};

struct Event;

struct Request {
  std::vector<int32_t> prompt_ids;
  SamplingParams sampling;
  int n = 1;                 // parallel samples (or, with beam_width > 1, best beams returned)
  int beam_width = 1;        // > 1: beam search (sampling ignored)
  float length_penalty = 1.0f;
  bool early_stopping = false;
  int logprobs = -1;         // -1: none; k >= 0: logprob of the chosen token + top-k alternatives
  StopConditions stop;
  // Structured output: only tokens the grammar allows next are sampled (engine/grammar/), EOS and the stop
  // token ids only where the grammar is complete. nullptr: unconstrained.
  std::shared_ptr<const grammar::Grammar> grammar;
  // Receives the events, on the engine thread; must return quickly (post work elsewhere).
  std::function<void(const Event&)> sink;
};

enum class FinishReason { Stop, Length, Cancelled, Error };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "cancelled", "error"

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;  // over every returned choice
  int cached_tokens = 0;      // prompt tokens served from the prefix cache
};

struct TokenEvent {
  int index = 0;                // choice index in [0, n)
  int32_t token_id = 0;
  std::string text;             // text that became final with this token (may be empty)
  float logprob = 0.0f;         // when logprobs >= 0
  std::vector<std::pair<int32_t, float>> top_logprobs;  // [logprobs] most likely, descending
};

struct FinishedEvent {
  int index = 0;
  FinishReason reason = FinishReason::Stop;
  Usage usage;                  // the request's totals so far (complete on the last FinishedEvent)
  // Beam search returns whole sequences at the end instead of streaming tokens.
  std::vector<int32_t> token_ids;
  std::string text;
  double cumulative_logprob = 0.0;
  double queue_seconds = 0.0;   // from submit() until the request was first scheduled
};

struct ErrorEvent {
  std::string message;
};

struct Event {
  std::variant<TokenEvent, FinishedEvent, ErrorEvent> value;
  bool last = false;  // no more events follow for this request
};

}  // namespace inflight::engine

// Sequence and RequestState: what the engine keeps per request while it runs. One request has one
// sequence until its prompt is computed, then n sampled sequences or beam_width beams that share the
// prompt's blocks.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/block_pool.h"
#include "engine/beam_search.h"
#include "engine/grammar/matcher.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/stop_checker.h"
#include "engine/tokenizer.h"

namespace inflight::engine {

struct RequestState;

struct Sequence {
  RequestState* request = nullptr;
  int index = 0;                    // choice index (sampling) or beam slot
  std::vector<int32_t> tokens;      // prompt + generated
  int num_computed = 0;             // tokens whose K/V is in the cache; the next step starts here
  cache::BlockTable table;
  std::vector<uint64_t> block_hashes;  // hashes of the full blocks of `tokens`, in order (prefix cache)
  int num_cached_blocks = 0;        // leading blocks registered in the prefix cache
  bool finished = false;
  // Where the output stands in the request's grammar (structured output); forked with the sequence. It keeps
  // its place through a preemption, which recomputes the same tokens.
  std::optional<grammar::Matcher> matcher;

  // Sampled sequences only.
  std::unique_ptr<Sampler> sampler;
  std::optional<IncrementalDetokenizer> detokenizer;
  StopChecker stop_checker;

  // Beam sequences only: the beam that wrote each position ([tokens.size()]).
  std::vector<int32_t> cache_indir;
  double cumulative_logprob = 0.0;

  int num_prompt() const;
  int num_generated() const { return int(tokens.size()) - num_prompt(); }
  int num_uncomputed() const { return int(tokens.size()) - num_computed; }
};

struct RequestState {
  uint64_t id = 0;
  uint64_t arrival = 0;  // the order the engine took requests in (the prefill order's oldest first)
  Request request;
  std::vector<std::unique_ptr<Sequence>> seqs;  // one until the prompt is computed, then n or beam_width
  bool forked = false;
  bool started = false;  // scheduled at least once
  std::chrono::steady_clock::time_point submitted_at;
  double queue_seconds = 0;  // submit -> first scheduled
  std::unique_ptr<BeamSearch> beam;  // beam requests, from their first step
  int num_finished = 0;
  Usage usage;

  bool is_beam() const { return request.beam_width > 1; }
  int num_choices() const { return request.n; }
  int num_prompt() const { return int(request.prompt_ids.size()); }
};

inline int Sequence::num_prompt() const { return request->num_prompt(); }

}  // namespace inflight::engine

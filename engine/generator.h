// Generator: runs one prompt to completion on a Model and a KvCache, without a scheduler
// (`inflight generate`, golden tests). The engine loop replaces it for many requests.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "engine/tokenizer.h"

namespace inflight::engine {

struct GenerateOptions {
  int max_tokens = 64;
  SamplingParams sampling;
  bool stop_at_eos = true;
  int prefill_chunk = 0;        // 0: whole prompt in one step; else at most this many tokens a step
  int keep_logits = 0;          // keep the logits of the first `keep_logits` generated positions
};

struct GenerateResult {
  std::vector<int32_t> generated_ids;
  std::string text;                       // detokenized generated text
  std::vector<std::vector<float>> logits; // [min(keep_logits, steps), vocab]
  std::string finish_reason;              // "stop" (EOS) or "length"
  double prefill_seconds = 0, decode_seconds = 0;
};

// on_text(delta) is called with each complete piece of text as it is produced.
// Returns an error (LoadError is not involved) via std::invalid_argument when the prompt does not fit.
GenerateResult generate(Model& model, cache::KvCache& kv, const Tokenizer& tokenizer,
                        const std::vector<int32_t>& prompt_ids, const GenerateOptions& options,
                        const std::function<void(const std::string&)>& on_text = {});

}  // namespace inflight::engine

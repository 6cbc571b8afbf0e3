// Model: the Llama-family forward pass over one packed batch, reading and writing the paged KV cache.
#pragma once
#include <vector>

#include "cache/kv_cache.h"
#include "engine/batch.h"
#include "engine/weights.h"

namespace inflight::engine {

class Model {
 public:
  explicit Model(ModelWeights weights);

  const ModelConfig& config() const { return w_.config; }
  const ModelWeights& weights() const { return w_; }

  // Runs every layer on the batch, appends its K/V to `kv`, and writes the logits of
  // batch.logits_rows to `logits` ([logits_rows.size(), vocab_size]).
  void forward(const ScheduledBatch& batch, cache::KvCache& kv, float* logits);

 private:
  void ensure_scratch(int num_tokens);

  ModelWeights w_;
  // Scratch, [num_tokens, *]; grown on demand.
  std::vector<float> x_, xb_, qkv_q_, qkv_k_, qkv_v_, att_, hb_, hb2_, rows_;
  int scratch_tokens_ = 0;
};

}  // namespace inflight::engine

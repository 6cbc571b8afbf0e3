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
  // batch.logits_rows to `logits` ([logits_rows.size(), vocab_size]). A batch of more than
  // max_pass_tokens() tokens runs as consecutive passes over even slices of its tokens (llama.cpp's
  // micro-batches, n_ubatch): a later slice of a prompt reads the earlier ones' keys from the cache, as
  // a chunked prefill does, so the logits are the same bits; each pass's activations stay in the caches.
  void forward(const ScheduledBatch& batch, cache::KvCache& kv, float* logits);

  // Tokens per pass (forward); 0: one pass, whatever the batch.
  static constexpr int kDefaultMaxPassTokens = 256;
  int max_pass_tokens() const { return max_pass_tokens_; }
  void set_max_pass_tokens(int n) { max_pass_tokens_ = n; }
  int last_num_passes() const { return last_num_passes_; }  // of the latest forward

 private:
  void forward_pass(const ScheduledBatch& batch, cache::KvCache& kv, float* logits);
  void ensure_scratch(int num_tokens);

  ModelWeights w_;
  int max_pass_tokens_ = kDefaultMaxPassTokens;
  int last_num_passes_ = 0;
  // Scratch, [num_tokens, *]; grown on demand.
  std::vector<float> x_, xb_, qkv_q_, qkv_k_, qkv_v_, att_, hb_, hb2_, rows_;
  int scratch_tokens_ = 0;
};

}  // namespace inflight::engine

// Model: the Llama-family forward pass over one packed batch, reading and writing the paged KV cache.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "engine/batch.h"
#include "engine/weights.h"
#include "kernels/huge_pages.h"

namespace inflight::engine {

// Where a Model computes. The engine, the scheduler and the KV cache's bookkeeping stay on the host either way.
enum class Device : uint8_t {
  Cpu,
  Cuda,  // an NVIDIA GPU (a build with INFLIGHT_CUDA): the weights and the KV cache in GPU memory
};
const char* device_name(Device d);
// "auto", "cpu" or "cuda" to a device: auto is cuda where a CUDA device is usable, else cpu. *why says why the
// choice was made (or, on false, why it cannot be: an unknown name, cuda without a GPU or without the backend).
bool resolve_device(const std::string& name, Device* out, std::string* why);

// Free and total bytes of the GPU's memory (cudaMemGetInfo); {0, 0} without a usable CUDA device.
struct GpuMemory {
  int64_t free = 0, total = 0;
};
GpuMemory gpu_memory();

class CudaModel;

class Model {
 public:
  // Device::Cuda uploads the weights to the GPU (engine/model_cuda.h); throws std::runtime_error where that
  // cannot be (no CUDA backend in this build, no GPU, too little GPU memory).
  explicit Model(ModelWeights weights, Device device = Device::Cpu);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  Device device() const { return device_; }
  // GPU memory of the weights (Device::Cuda), else 0.
  int64_t device_weight_bytes() const;
  // Bytes of the activations of a step of max_tokens tokens and max_logits_rows logits rows (an upper
  // bound, as the server reserves it on the GPU before sizing the KV cache).
  int64_t activation_bytes(int max_tokens, int max_logits_rows) const;

  const ModelConfig& config() const { return w_.config; }
  const ModelWeights& weights() const { return w_; }

  // Runs every layer on the batch, appends its K/V to `kv`, and writes the logits of
  // batch.logits_rows to `logits` ([logits_rows.size(), vocab_size], host memory). On the CPU, a batch of
  // more than max_pass_tokens() tokens runs as consecutive passes over even slices of its tokens (llama.cpp's
  // micro-batches, n_ubatch): a later slice of a prompt reads the earlier ones' keys from the cache, as
  // a chunked prefill does, so the logits are the same bits; each pass's activations stay in the caches.
  // On Device::Cuda, `kv` must live in GPU memory (cache::KvDevice::Cuda) and the batch runs as one pass.
  void forward(const ScheduledBatch& batch, cache::KvCache& kv, float* logits);

  // Tokens per pass (forward); 0: one pass, whatever the batch.
  static constexpr int kDefaultMaxPassTokens = 256;
  int max_pass_tokens() const { return max_pass_tokens_; }
  void set_max_pass_tokens(int n) { max_pass_tokens_ = n; }
  int last_num_passes() const { return last_num_passes_; }  // of the latest forward

 private:
  void forward_pass(const ScheduledBatch& batch, cache::KvCache& kv, float* logits);
  void ensure_scratch(int num_tokens);
  // The attention of the last layer's kept rows (forward_pass): each logits row as a sequence of one query.
  kernels::AttentionParams kept_rows_attention(const ScheduledBatch& batch, const kernels::AttentionParams& ap);

  ModelWeights w_;
  Device device_ = Device::Cpu;
  std::unique_ptr<CudaModel> cuda_;  // Device::Cuda
  int max_pass_tokens_ = kDefaultMaxPassTokens;
  int last_num_passes_ = 0;
  // Scratch, [T, *] arrays in scratch_ (2 MiB pages); grown on demand (ensure_scratch).
  float* x_ = nullptr;      // [T, dim] residual stream
  float* xb_ = nullptr;     // [T, dim] normed input / block output
  float* qkv_q_ = nullptr;  // [T, Nq * H]
  float* qkv_k_ = nullptr;  // [T, Nkv * H]
  float* qkv_v_ = nullptr;  // [T, Nkv * H]
  float* att_ = nullptr;    // [T, Nq * H] attention output
  float* hb_ = nullptr;     // [T, ffn] gate, then silu(gate) * up
  float* hb2_ = nullptr;    // [T, ffn] up
  kernels::HugePageMemory scratch_;
  std::vector<float> rows_;
  struct {
    std::vector<int32_t> q_start, past_len, positions, block_tables;
  } kept_;  // kept_rows_attention's batch
  int scratch_tokens_ = 0;
};

}  // namespace inflight::engine

// KvCache: the memory of the paged KV cache, all layers, and the block pool that hands it out.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cache/block_pool.h"
#include "kernels/attention_params.h"

namespace inflight::cache {

// Calibration from a first step: the per-tensor scale covers this times the largest |K| / |V| the step
// stores, leaving room for later tokens (a 1-token first prompt sees little of the range).
inline constexpr float kStaticScaleMargin = 2.0f;

// Where the blocks live. The pool, tables, prefix cache and reference counts stay on the host either way.
enum class KvDevice : uint8_t {
  Cpu,
  Cuda,  // GPU memory (a build with INFLIGHT_CUDA): layer_view() gives device pointers
};

struct KvCacheConfig {
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int block_size = 16;  // tokens per block, a power of two
  int num_blocks = 0;
  kernels::KvDType dtype = kernels::KvDType::F32;
  // Int8: channels per scale (divides head_dim, >= 8); 0 means head_dim (one scale per token and head).
  int quant_group = 0;
  // Int8Static / Fp8*: |x| the per-tensor scales of K and V map onto the largest code
  // (kv_static_scale_for_amax); 0: calibrated per layer and for K and V separately from the first step
  // that appends to the layer (Model::forward), times kStaticScaleMargin.
  float static_amax = 0.0f;
  KvDevice device = KvDevice::Cpu;
};

class KvCache {
 public:
  // Aborts with a message on a block size that is not a power of two (validated by callers first).
  explicit KvCache(const KvCacheConfig& config);

  const KvCacheConfig& config() const { return config_; }
  BlockPool& pool() { return pool_; }
  const BlockPool& pool() const { return pool_; }

  // Bytes of one block across all layers, K and V.
  int64_t bytes_per_block() const;
  int64_t total_bytes() const { return bytes_per_block() * config_.num_blocks; }

  bool on_device() const { return config_.device == KvDevice::Cuda; }

  // Copies block `src` into block `dst` in every layer (copy-on-write of a shared block). On the CPU at once;
  // on the GPU the copy is queued, and flush_copies runs the queue.
  void copy_block(int32_t src, int32_t dst);
  // GPU: runs the copies queued since the last flush as one batched device copy on `stream` (a cudaStream_t;
  // nullptr: the default stream), before the step's kernels read the blocks. CPU: nothing to do.
  void flush_copies(void* stream);
  int pending_copies() const { return int(pending_.size() / 2); }

  // Makes positions [from, to) of `table` writable: a shared block among them (ref count > 1) is
  // replaced by a private copy. The table must already cover `to` tokens. False when the pool is short.
  bool make_writable(BlockTable& table, int64_t from, int64_t to);

  // The kernels' view of `layer`, without block tables (the caller fills them per batch).
  kernels::PagedKvView layer_view(int layer) const;

  // Int8Static / Fp8*: the per-tensor dequant scale (kv_quant_orig_scale) of K (kv = 0) or V (kv = 1) of
  // `layer`; 0 until set (from config.static_amax at construction, else by the first step's calibration).
  float static_scale(int layer, int kv) const { return static_scales_[size_t(layer) * 2 + kv]; }
  void set_static_scale(int layer, int kv, float quant_orig_scale) { static_scales_[size_t(layer) * 2 + kv] = quant_orig_scale; }
  // Sets `layer`'s K and V scales from the largest |K| and |V| of a first step (kernels::kv_append_amax), times
  // kStaticScaleMargin: the calibration of a cache made without static_amax.
  void calibrate_static_scales(int layer, const float amax[2]) {
    for (int i = 0; i < 2; ++i)
      set_static_scale(layer, i, kernels::kv_static_scale_for_amax(config_.dtype, amax[i] * kStaticScaleMargin));
  }
  int quant_group() const { return quant_group_; }

 private:
  KvCacheConfig config_;
  BlockPool pool_;
  int64_t layer_bytes_ = 0;  // [num_blocks, 2, Nkv, block_size, H] elements of dtype
  struct FreeDeleter {
    FreeDeleter() : device(false) {}
    explicit FreeDeleter(bool on_device) : device(on_device) {}
    bool device;  // cudaFree, else free
    void operator()(void* p) const;
  };
  // NOTE: 2 MiB aligned and advised as transparent huge pages: a head's rows of one block are one 4 KiB
  // page, so with small pages every 16 tokens of a decode read are a TLB miss (int8 decode: 20% slower).
  std::unique_ptr<uint8_t[], FreeDeleter> data_;
  int quant_group_ = 0;                 // Int8: channels per scale; 0 for the other dtypes
  int64_t layer_scales_ = 0;            // Int8: [num_blocks, 2, Nkv, block_size, H / quant_group] floats
  std::unique_ptr<float[], FreeDeleter> scales_;  // [num_layers] x layer_scales_
  std::vector<float> static_scales_;    // [num_layers, 2] Int8Static / Fp8*: K, V quant_orig scales, 0 = unset
  std::vector<int32_t> pending_;        // GPU: queued copies, (src, dst) pairs
  std::unique_ptr<int32_t[], FreeDeleter> pending_dev_;  // GPU: the pairs' device copy
  int64_t pending_dev_capacity_ = 0;    // ints
};

// Why `config` cannot make a cache (quant_group / static_amax out of range; a GPU cache in a build without
// CUDA or on a machine without a usable GPU), or "" when it can. Block size and counts are checked by their
// owners.
std::string kv_config_error(const KvCacheConfig& config);

// Number of blocks of `config` (num_blocks ignored) that fit in `bytes`.
int blocks_for_bytes(const KvCacheConfig& config, int64_t bytes);

inline bool is_power_of_two(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

}  // namespace inflight::cache

#include "cache/kv_cache.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace inflight::cache {

namespace {
int64_t layer_elems_per_block(const KvCacheConfig& c) {
  return 2 * int64_t(c.num_kv_heads) * c.block_size * c.head_dim;
}
}  // namespace

KvCache::KvCache(const KvCacheConfig& config) : config_(config), pool_(config.num_blocks) {
  if (!is_power_of_two(config.block_size)) {
    std::fprintf(stderr, "%s:%d: KV block size %d is not a power of two\n", __FILE__, __LINE__, config.block_size);
    std::abort();
  }
  layer_bytes_ = layer_elems_per_block(config) * kernels::kv_elem_bytes(config.dtype) * config.num_blocks;
  const int64_t total = layer_bytes_ * config.num_layers;
  data_.reset(new uint8_t[size_t(total)]);
  // NOTE: zeroed so that a kernel bug reading an unwritten slot gives zeros, not NaNs from garbage.
  std::memset(data_.get(), 0, size_t(total));
}

int64_t KvCache::bytes_per_block() const {
  return layer_elems_per_block(config_) * kernels::kv_elem_bytes(config_.dtype) * config_.num_layers;
}

kernels::PagedKvView KvCache::layer_view(int layer) const {
  kernels::PagedKvView v;
  v.data = data_.get() + layer_bytes_ * layer;
  v.dtype = config_.dtype;
  v.num_blocks = config_.num_blocks;
  v.block_size = config_.block_size;
  v.num_kv_heads = config_.num_kv_heads;
  v.head_dim = config_.head_dim;
  return v;
}

int blocks_for_bytes(const KvCacheConfig& config, int64_t bytes) {
  const int64_t per_block =
      layer_elems_per_block(config) * kernels::kv_elem_bytes(config.dtype) * config.num_layers;
  return per_block > 0 ? int(bytes / per_block) : 0;
}

}  // namespace inflight::cache

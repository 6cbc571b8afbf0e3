#include "cache/kv_cache.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

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

void KvCache::copy_block(int32_t src, int32_t dst) {
  const int64_t block_bytes = layer_elems_per_block(config_) * kernels::kv_elem_bytes(config_.dtype);
  for (int l = 0; l < config_.num_layers; ++l) {
    uint8_t* base = data_.get() + layer_bytes_ * l;
    std::memcpy(base + block_bytes * dst, base + block_bytes * src, size_t(block_bytes));
  }
}

bool KvCache::make_writable(BlockTable& table, int64_t from, int64_t to) {
  if (to <= from) return true;
  std::vector<int32_t>& blocks = table.mutable_blocks();
  const int bs = table.block_size();
  for (int64_t i = from / bs; i <= (to - 1) / bs; ++i) {
    const int32_t b = blocks[size_t(i)];
    if (pool_.ref_count(b) == 1) continue;
    std::vector<int32_t> fresh;
    if (!pool_.allocate(1, &fresh)) return false;
    copy_block(b, fresh[0]);
    pool_.release(b);
    blocks[size_t(i)] = fresh[0];
  }
  return true;
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

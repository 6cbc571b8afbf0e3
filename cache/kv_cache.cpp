#include "cache/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <sys/mman.h>

#ifdef INFLIGHT_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/copy_blocks.h"
#include "kernels/cuda/cuda_check.h"
#endif

namespace inflight::cache {

namespace {
int64_t layer_elems_per_block(const KvCacheConfig& c) {
  return 2 * int64_t(c.num_kv_heads) * c.block_size * c.head_dim;
}
int effective_quant_group(const KvCacheConfig& c) {
  if (!kernels::kv_has_group_scales(c.dtype)) return 0;
  return c.quant_group > 0 ? c.quant_group : c.head_dim;
}
// Int8 group scales of one block of one layer, in floats.
int64_t layer_scales_per_block(const KvCacheConfig& c) {
  const int g = effective_quant_group(c);
  return g > 0 ? 2 * int64_t(c.num_kv_heads) * c.block_size * (c.head_dim / g) : 0;
}
int64_t block_bytes_one_layer(const KvCacheConfig& c) {
  return layer_elems_per_block(c) * kernels::kv_elem_bytes(c.dtype) + layer_scales_per_block(c) * 4;
}
// Zeroed memory of `bytes`, 2 MiB aligned and advised as transparent huge pages.
void* allocate_zeroed_huge(int64_t bytes) {
  constexpr size_t kHuge = size_t(2) << 20;
  const size_t size = (size_t(std::max<int64_t>(bytes, 1)) + kHuge - 1) / kHuge * kHuge;
  void* p = std::aligned_alloc(kHuge, size);
  if (p == nullptr) {
    std::fprintf(stderr, "%s:%d: cannot allocate %zu bytes of KV cache\n", __FILE__, __LINE__, size);
    std::abort();
  }
#ifdef MADV_HUGEPAGE
  madvise(p, size, MADV_HUGEPAGE);  // a hint: without THP the cache still works on small pages
#endif
  // NOTE: zeroed so that a kernel bug reading an unwritten slot gives zeros, not NaNs from garbage.
  std::memset(p, 0, size);
  return p;
}

[[noreturn]] void fail(const char* file, int line, const char* what, int value) {
  std::fprintf(stderr, "%s:%d: %s (%d)\n", file, line, what, value);
  std::abort();
}

#ifdef INFLIGHT_CUDA
// Zeroed device memory of `bytes` (kv_config_error has checked that a GPU is there).
void* allocate_zeroed_device(int64_t bytes) {
  void* p = nullptr;
  const size_t size = size_t(std::max<int64_t>(bytes, 1));
  INFLIGHT_CUDA_CHECK(cudaMalloc(&p, size));
  INFLIGHT_CUDA_CHECK(cudaMemset(p, 0, size));
  // Done before any stream uses the blocks (a model's own stream does not wait for the default one).
  INFLIGHT_CUDA_CHECK(cudaDeviceSynchronize());
  return p;
}
#endif

// Zeroed memory of `bytes` where the config places the cache.
void* allocate_zeroed(const KvCacheConfig& c, int64_t bytes) {
#ifdef INFLIGHT_CUDA
  if (c.device == KvDevice::Cuda) return allocate_zeroed_device(bytes);
#endif
  (void)c;
  return allocate_zeroed_huge(bytes);
}
}  // namespace

KvCache::KvCache(const KvCacheConfig& config) : config_(config), pool_(config.num_blocks) {
  if (!is_power_of_two(config.block_size)) fail(__FILE__, __LINE__, "KV block size is not a power of two", config.block_size);
  quant_group_ = effective_quant_group(config);
  if (quant_group_ > 0 && (quant_group_ < 8 || config.head_dim % quant_group_ != 0))
    fail(__FILE__, __LINE__, "int8 KV quant_group must be >= 8 and divide head_dim", quant_group_);
  layer_bytes_ = layer_elems_per_block(config) * kernels::kv_elem_bytes(config.dtype) * config.num_blocks;
  const int64_t total = layer_bytes_ * config.num_layers;
#ifndef INFLIGHT_CUDA
  if (config.device == KvDevice::Cuda) fail(__FILE__, __LINE__, "a GPU KV cache in a build without CUDA", 0);
#endif
  const FreeDeleter deleter(config.device == KvDevice::Cuda);
  data_ = {static_cast<uint8_t*>(allocate_zeroed(config, total)), deleter};
  layer_scales_ = layer_scales_per_block(config) * config.num_blocks;
  if (layer_scales_ > 0)
    scales_ = {static_cast<float*>(allocate_zeroed(config, layer_scales_ * config.num_layers * 4)), deleter};
  pending_dev_ = {nullptr, deleter};
  const float preset =
      kernels::kv_has_static_scale(config.dtype) && config.static_amax > 0.0f
          ? kernels::kv_static_scale_for_amax(config.dtype, config.static_amax)
          : 0.0f;
  static_scales_.assign(size_t(config.num_layers) * 2, preset);
}

void KvCache::FreeDeleter::operator()(void* p) const {
#ifdef INFLIGHT_CUDA
  if (device) {
    cudaFree(p);
    return;
  }
#endif
  std::free(p);
}

int64_t KvCache::bytes_per_block() const { return block_bytes_one_layer(config_) * config_.num_layers; }

void KvCache::copy_block(int32_t src, int32_t dst) {
  if (on_device()) {
    pending_.push_back(src);
    pending_.push_back(dst);
    return;
  }
  const int64_t block_bytes = layer_elems_per_block(config_) * kernels::kv_elem_bytes(config_.dtype);
  const int64_t block_scales = layer_scales_per_block(config_);
  for (int l = 0; l < config_.num_layers; ++l) {
    uint8_t* base = data_.get() + layer_bytes_ * l;
    std::memcpy(base + block_bytes * dst, base + block_bytes * src, size_t(block_bytes));
    if (block_scales > 0) {
      float* s = scales_.get() + layer_scales_ * l;
      std::memcpy(s + block_scales * dst, s + block_scales * src, size_t(block_scales) * 4);
    }
  }
}

void KvCache::flush_copies(void* stream) {
  if (pending_.empty()) return;
#ifdef INFLIGHT_CUDA
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (int64_t(pending_.size()) > pending_dev_capacity_) {
    int32_t* p = nullptr;
    INFLIGHT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p), pending_.size() * sizeof(int32_t)));
    pending_dev_.reset(p);  // cudaFree synchronizes: no copy still reads the old list
    pending_dev_capacity_ = int64_t(pending_.size());
  }
  // From pageable memory: the call returns once the list is staged, so pending_ may change at once.
  INFLIGHT_CUDA_CHECK(
      cudaMemcpyAsync(pending_dev_.get(), pending_.data(), pending_.size() * sizeof(int32_t), cudaMemcpyHostToDevice, s));
  const int n = pending_copies();
  const int64_t block_bytes = layer_elems_per_block(config_) * kernels::kv_elem_bytes(config_.dtype);
  kernels::cuda::copy_blocks(data_.get(), layer_bytes_, block_bytes, config_.num_layers, pending_dev_.get(), n, s);
  if (layer_scales_ > 0)
    kernels::cuda::copy_blocks(scales_.get(), layer_scales_ * 4, layer_scales_per_block(config_) * 4, config_.num_layers,
                               pending_dev_.get(), n, s);
#else
  (void)stream;
#endif
  pending_.clear();
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
  if (layer_scales_ > 0) {
    v.scales = scales_.get() + layer_scales_ * layer;
    v.quant_group = quant_group_;
  }
  for (int kv = 0; kv < 2; ++kv) {
    const float s = static_scales_[size_t(layer) * 2 + kv];
    if (s > 0.0f) {
      v.quant_orig_scale[kv] = s;
      v.orig_quant_scale[kv] = 1.0f / s;
    }
  }
  return v;
}

std::string kv_config_error(const KvCacheConfig& c) {
  if (c.device == KvDevice::Cuda) {
#ifdef INFLIGHT_CUDA
    std::string why;
    if (!kernels::cuda::device_available(&why)) return "a GPU KV cache needs a CUDA device: " + why;
#else
    return "a GPU KV cache needs a build with CUDA (INFLIGHT_CUDA), and this one has none";
#endif
  }
  if (c.quant_group < 0) return "kv quant group must be >= 0 (0: head_dim), got " + std::to_string(c.quant_group);
  const int g = effective_quant_group(c);
  if (g > 0 && (g < 8 || c.head_dim % g != 0))
    return "kv quant group " + std::to_string(g) + " must be >= 8 and divide the head dim " + std::to_string(c.head_dim);
  if (!(c.static_amax >= 0.0f) || std::isinf(c.static_amax))
    return "kv static amax must be a finite value >= 0 (0: calibrate), got " + std::to_string(c.static_amax);
  return "";
}

int blocks_for_bytes(const KvCacheConfig& config, int64_t bytes) {
  const int64_t per_block = block_bytes_one_layer(config) * config.num_layers;
  return per_block > 0 ? int(bytes / per_block) : 0;
}

}  // namespace inflight::cache

#include "cache/block_pool.h"

#include <cstdio>
#include <cstdlib>

namespace inflight::cache {

namespace {
[[noreturn]] void invariant_failed(const char* what, int32_t block) {
  std::fprintf(stderr, "%s:%d: block pool invariant broken: %s (block %d)\n", __FILE__, __LINE__, what, block);
  std::abort();
}
}  // namespace

BlockPool::BlockPool(int num_blocks) : ref_counts_(size_t(num_blocks), 0) {
  free_.reserve(size_t(num_blocks));
  // Lowest ids on top of the stack, so a fresh pool hands out 0, 1, 2, ...
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

bool BlockPool::allocate(int n, std::vector<int32_t>* out) {
  if (n > int(free_.size())) return false;
  for (int i = 0; i < n; ++i) {
    const int32_t b = free_.back();
    free_.pop_back();
    ref_counts_[size_t(b)] = 1;
    out->push_back(b);
  }
  return true;
}

void BlockPool::retain(int32_t block) {
  if (ref_counts_[size_t(block)] <= 0) invariant_failed("retain of a free block", block);
  ++ref_counts_[size_t(block)];
}

void BlockPool::release(int32_t block) {
  if (ref_counts_[size_t(block)] <= 0) invariant_failed("release of a free block", block);
  if (--ref_counts_[size_t(block)] == 0) free_.push_back(block);
}

bool BlockTable::reserve(BlockPool& pool, int64_t num_tokens) {
  const int64_t needed = (num_tokens + block_size_ - 1) / block_size_ - int64_t(blocks_.size());
  if (needed <= 0) return true;
  return pool.allocate(int(needed), &blocks_);
}

BlockTable BlockTable::fork(BlockPool& pool) const {
  for (int32_t b : blocks_) pool.retain(b);
  return *this;
}

void BlockTable::release(BlockPool& pool) {
  for (int32_t b : blocks_) pool.release(b);
  blocks_.clear();
}

}  // namespace inflight::cache

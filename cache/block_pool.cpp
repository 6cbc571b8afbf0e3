#include "cache/block_pool.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace inflight::cache {

namespace {
[[noreturn]] void invariant_failed(const char* what, int32_t block) {
  std::fprintf(stderr, "%s:%d: block pool invariant broken: %s (block %d)\n", __FILE__, __LINE__, what, block);
  std::abort();
}
}  // namespace

uint64_t hash_block(uint64_t parent_hash, std::span<const int32_t> tokens) {
  // FNV-1a over the parent hash and the token ids, then a splitmix64 finaliser.
  uint64_t h = 0xcbf29ce484222325ull ^ parent_hash;
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 0x100000001b3ull;
    }
  };
  for (int32_t t : tokens) mix(uint32_t(t));
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}

BlockPool::BlockPool(int num_blocks)
    : ref_counts_(size_t(num_blocks), 0),
      prev_(size_t(num_blocks), -1),
      next_(size_t(num_blocks), -1),
      in_free_(size_t(num_blocks), 0),
      block_hash_(size_t(num_blocks), 0),
      has_hash_(size_t(num_blocks), 0),
      block_tokens_(size_t(num_blocks)) {
  for (int32_t b = 0; b < num_blocks; ++b) push_free(b, false);  // a fresh pool hands out 0, 1, 2, ...
}

void BlockPool::push_free(int32_t b, bool front) {
  in_free_[size_t(b)] = 1;
  ++num_free_;
  if (head_ < 0) {
    head_ = tail_ = b;
    prev_[size_t(b)] = next_[size_t(b)] = -1;
  } else if (front) {
    prev_[size_t(b)] = -1;
    next_[size_t(b)] = head_;
    prev_[size_t(head_)] = b;
    head_ = b;
  } else {
    next_[size_t(b)] = -1;
    prev_[size_t(b)] = tail_;
    next_[size_t(tail_)] = b;
    tail_ = b;
  }
}

void BlockPool::unlink_free(int32_t b) {
  if (!in_free_[size_t(b)]) invariant_failed("unlink of a block not in the free queue", b);
  const int32_t p = prev_[size_t(b)], n = next_[size_t(b)];
  (p >= 0 ? next_[size_t(p)] : head_) = n;
  (n >= 0 ? prev_[size_t(n)] : tail_) = p;
  prev_[size_t(b)] = next_[size_t(b)] = -1;
  in_free_[size_t(b)] = 0;
  --num_free_;
}

void BlockPool::uncache(int32_t b) {
  if (!has_hash_[size_t(b)]) return;
  auto it = cached_.find(block_hash_[size_t(b)]);
  if (it != cached_.end() && it->second == b) cached_.erase(it);
  has_hash_[size_t(b)] = 0;
  block_tokens_[size_t(b)].clear();
}

bool BlockPool::allocate(int n, std::vector<int32_t>* out) {
  if (n > num_free_) return false;
  for (int i = 0; i < n; ++i) {
    const int32_t b = head_;
    unlink_free(b);
    uncache(b);  // evicted: its old contents are about to be overwritten
    ref_counts_[size_t(b)] = 1;
    out->push_back(b);
  }
  return true;
}

void BlockPool::retain(int32_t b) {
  if (ref_counts_[size_t(b)] == 0) {
    if (!has_hash_[size_t(b)]) invariant_failed("retain of a free, uncached block", b);
    unlink_free(b);  // a prefix-cache hit revives it
  }
  ++ref_counts_[size_t(b)];
}

void BlockPool::release(int32_t b) {
  if (ref_counts_[size_t(b)] <= 0) invariant_failed("release of a free block", b);
  if (--ref_counts_[size_t(b)] == 0) push_free(b, /*front=*/!has_hash_[size_t(b)]);
}

void BlockPool::cache_block(int32_t b, uint64_t hash, std::span<const int32_t> tokens) {
  if (has_hash_[size_t(b)] || cached_.count(hash)) return;  // already cached (here or as a twin)
  cached_[hash] = b;
  block_hash_[size_t(b)] = hash;
  has_hash_[size_t(b)] = 1;
  block_tokens_[size_t(b)].assign(tokens.begin(), tokens.end());
}

int32_t BlockPool::lookup(uint64_t hash, std::span<const int32_t> tokens) const {
  auto it = cached_.find(hash);
  if (it == cached_.end()) return -1;
  const auto& stored = block_tokens_[size_t(it->second)];
  if (!std::equal(stored.begin(), stored.end(), tokens.begin(), tokens.end())) return -1;
  return it->second;
}

void BlockPool::clear_cache() {
  for (int32_t b = 0; b < num_blocks(); ++b) uncache(b);
}

int BlockTable::blocks_needed(int64_t num_tokens) const {
  const int64_t needed = (num_tokens + block_size_ - 1) / block_size_ - int64_t(blocks_.size());
  return needed > 0 ? int(needed) : 0;
}

bool BlockTable::reserve(BlockPool& pool, int64_t num_tokens) {
  const int needed = blocks_needed(num_tokens);
  return needed == 0 || pool.allocate(needed, &blocks_);
}

BlockTable BlockTable::fork(BlockPool& pool) const {
  for (int32_t b : blocks_) pool.retain(b);
  return *this;
}

void BlockTable::release(BlockPool& pool) {
  for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) pool.release(*it);
  blocks_.clear();
}

void BlockPool::block_states(std::vector<BlockState>* out) const {
  out->resize(ref_counts_.size());
  for (size_t b = 0; b < ref_counts_.size(); ++b) {
    const int32_t refs = ref_counts_[b];
    if (refs > 1) (*out)[b] = BlockState::Shared;
    else if (refs == 1) (*out)[b] = BlockState::Used;
    else (*out)[b] = has_hash_[b] ? BlockState::Cached : BlockState::Free;
  }
}

}  // namespace inflight::cache

// BlockPool: fixed-size KV blocks with reference counts. A block is free when its count is zero.
// BlockTable: one sequence's logical -> physical block map; forks share blocks (copy-on-write).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace inflight::cache {

class BlockPool {
 public:
  explicit BlockPool(int num_blocks);

  int num_blocks() const { return int(ref_counts_.size()); }
  int num_free() const { return int(free_.size()); }

  // Takes `n` free blocks (ref count 1) into `out`; returns false and takes nothing if fewer are free.
  bool allocate(int n, std::vector<int32_t>* out);
  void retain(int32_t block);   // one more owner
  void release(int32_t block);  // one owner fewer; the block is free again at zero
  int ref_count(int32_t block) const { return ref_counts_[block]; }

 private:
  std::vector<int32_t> ref_counts_;  // [num_blocks]
  std::vector<int32_t> free_;        // stack of free block ids
};

class BlockTable {
 public:
  BlockTable() = default;
  explicit BlockTable(int block_size) : block_size_(block_size) {}

  int block_size() const { return block_size_; }
  std::span<const int32_t> blocks() const { return blocks_; }
  int num_blocks() const { return int(blocks_.size()); }
  int64_t capacity() const { return int64_t(blocks_.size()) * block_size_; }  // tokens

  // Grows the table so it holds `num_tokens` tokens; false (and unchanged) when the pool is short.
  bool reserve(BlockPool& pool, int64_t num_tokens);
  // A second owner of the same blocks (n > 1, beams, shared prefixes).
  BlockTable fork(BlockPool& pool) const;
  // Gives every block back to the pool.
  void release(BlockPool& pool);
  // Physical slot (block * block_size + offset) of logical position `pos`.
  int64_t slot(int64_t pos) const { return int64_t(blocks_[pos / block_size_]) * block_size_ + pos % block_size_; }

 private:
  int block_size_ = 16;
  std::vector<int32_t> blocks_;
};

}  // namespace inflight::cache

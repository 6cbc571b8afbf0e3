// BlockPool: fixed-size KV blocks with reference counts and a prefix cache (vLLM v1's block pool).
// BlockTable: one sequence's logical -> physical block map; forks share blocks (copy-on-write).
//
// A block whose count drops to zero goes back to the free queue. If it holds a full block of a
// prompt that was hashed (cache_block), it stays findable by that hash until it is handed out again:
// uncached free blocks are handed out first, then cached ones, least recently freed first.
#pragma once
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace inflight::cache {

// What a block holds, as the live server view shows it (one entry per block, BlockPool::block_states).
enum class BlockState : uint8_t {
  Free = 0,    // no owner, no cached prefix
  Used = 1,    // one owner
  Cached = 2,  // no owner, but it holds a cached prompt prefix a new sequence can take back
  Shared = 3,  // several owners: n > 1 samples, beams, or sequences sharing a cached prefix
};

// Hash of a full block: chains the parent block's hash with this block's token ids.
uint64_t hash_block(uint64_t parent_hash, std::span<const int32_t> tokens);

class BlockPool {
 public:
  explicit BlockPool(int num_blocks);

  int num_blocks() const { return int(ref_counts_.size()); }
  int num_free() const { return num_free_; }      // unowned blocks, cached ones included
  int num_cached() const { return int(cached_.size()); }
  int num_used() const { return num_blocks() - num_free_; }

  // Takes `n` free blocks (ref count 1) into `out`, evicting cached ones if needed; returns false and
  // takes nothing if fewer than `n` are free.
  bool allocate(int n, std::vector<int32_t>* out);
  void retain(int32_t block);   // one more owner (a cached free block is taken off the free queue)
  void release(int32_t block);  // one owner fewer; back to the free queue at zero
  int ref_count(int32_t block) const { return ref_counts_[size_t(block)]; }

  // The state of every block into `out` ([num_blocks]); O(num_blocks), for a snapshot, not the hot path.
  void block_states(std::vector<BlockState>* out) const;

  // Prefix cache. A block is registered once its `block_size` tokens are all computed.
  void cache_block(int32_t block, uint64_t hash, std::span<const int32_t> tokens);
  // The cached block with this hash and exactly these tokens, or -1.
  int32_t lookup(uint64_t hash, std::span<const int32_t> tokens) const;
  // Drops every cached block (prefix caching off, or a reset).
  void clear_cache();

 private:
  void push_free(int32_t block, bool front);
  void unlink_free(int32_t block);
  void uncache(int32_t block);

  std::vector<int32_t> ref_counts_;  // [num_blocks]
  // Free queue: a doubly linked list over block ids; head is handed out first.
  std::vector<int32_t> prev_, next_;  // [num_blocks], -1 ends
  std::vector<uint8_t> in_free_;      // [num_blocks]
  int32_t head_ = -1, tail_ = -1;
  int num_free_ = 0;
  // Cached blocks: hash -> block, and the tokens each cached block holds (checked on lookup).
  std::unordered_map<uint64_t, int32_t> cached_;
  std::vector<uint64_t> block_hash_;                 // [num_blocks] valid when has_hash_
  std::vector<uint8_t> has_hash_;                    // [num_blocks]
  std::vector<std::vector<int32_t>> block_tokens_;   // [num_blocks]
};

class BlockTable {
 public:
  BlockTable() = default;
  explicit BlockTable(int block_size) : block_size_(block_size) {}

  int block_size() const { return block_size_; }
  std::span<const int32_t> blocks() const { return blocks_; }
  std::vector<int32_t>& mutable_blocks() { return blocks_; }
  int num_blocks() const { return int(blocks_.size()); }
  int64_t capacity() const { return int64_t(blocks_.size()) * block_size_; }  // tokens

  // Grows the table so it holds `num_tokens` tokens; false (and unchanged) when the pool is short.
  bool reserve(BlockPool& pool, int64_t num_tokens);
  // Blocks needed to grow to `num_tokens` tokens.
  int blocks_needed(int64_t num_tokens) const;
  // A second owner of the same blocks (n > 1, beams, shared prefixes).
  BlockTable fork(BlockPool& pool) const;
  // Gives every block back to the pool (last block first, so a prefix's tail is evicted first).
  void release(BlockPool& pool);
  // Physical slot (block * block_size + offset) of logical position `pos`.
  int64_t slot(int64_t pos) const { return int64_t(blocks_[size_t(pos / block_size_)]) * block_size_ + pos % block_size_; }

 private:
  int block_size_ = 16;
  std::vector<int32_t> blocks_;
};

}  // namespace inflight::cache

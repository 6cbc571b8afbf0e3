// Internals shared by the CPU attention drivers (append, context, generation): RoPE tables, per-thread
// scratch, and the span fold over a paged (sequence, KV head). Compiled without ISA flags; the SIMD work
// happens in the tile routine (attention_tile.h).
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/attention_params.h"
#include "kernels/cpu/attention_tile.h"

namespace inflight::kernels::cpu {

// cos / sin of RoPE for a range of token rows, computed with the same float formulas, in the same
// order, as kernels::apply_rope, so rotating here is bit-identical to apply_rope (tested).
class RopeTable {
 public:
  // Rows [row_begin, row_end) of p at p.positions; empty (rotate is a no-op) when RoPE is off.
  void build(const AttentionParams& p, int64_t row_begin, int64_t row_end);
  bool on() const { return num_pairs_ > 0; }
  // Rotates one head ([head_dim] floats) of token row `row` in place.
  void rotate(int64_t row, float* head) const;

 private:
  RopeParams rope_;
  int num_pairs_ = 0;
  int64_t row_begin_ = 0;
  std::vector<float> cos_sin_;  // [rows, 2 * num_pairs]: cos, sin of pair i at 2i, 2i + 1
};

// The calling thread's scratch, grown on demand and reused across calls.
class Workspace {
 public:
  // At least num_floats floats, 64-byte aligned; invalidates what an earlier call returned.
  float* get(int64_t num_floats);

 private:
  std::vector<float> buf_;
};
Workspace& thread_workspace();

// R queries of one (sequence, KV head) attending together: a decode row's G heads or a context
// tile's rows x G heads.
struct QuerySet {
  int num = 0;                                  // R <= kMaxTileQueries
  const float* q = nullptr;                     // [R, padded_dim(head_dim)] rotated, zero padded
  int64_t lo[kMaxTileQueries] = {};             // visible keys [lo, hi), absolute positions
  int64_t hi[kMaxTileQueries] = {};
  const void* mask_key0[kMaxTileQueries] = {};  // mask element of key 0 for the query, or nullptr
};

// Visible keys [lo, hi) of the query at `pos` in a sequence of `total` keys (band mask).
void visible_keys(const AttentionParams& p, int64_t pos, int64_t total, int64_t* lo, int64_t* hi);

// Mask element of key 0 for sequence s, query head h, the sequence's query row i; nullptr without a mask.
const void* mask_key0(const AttentionParams& p, int s, int h, int64_t i);

// Floats of scratch attend_span needs for at most R queries per head (the tile's and the tile states').
int64_t span_scratch_floats(const AttentionParams& p, int num_queries);

// One KV head's share of a span fold: its queries and the states they fold into.
struct HeadWork {
  int kv_head = 0;
  const QuerySet* qs = nullptr;
  SoftmaxState* span = nullptr;  // [qs->num], empty on entry
};

// For each head of `heads`: span[r] <- the fold of the tile states of keys [span_begin, span_begin +
// kKvSpan) of sequence `seq` (total keys `total`) for query r, tiles in key order (the heads one after
// the other within a tile), skipping tiles no query of the head sees. While a tile is attended, the
// next one is prefetched: when `heads` covers every KV head (decode), as whole blocks in address order,
// shared out over the heads' tile calls, so DRAM sees one stream per sequence instead of a 4 KiB piece
// per head and block; otherwise (context, beams, blocks larger than a tile) row by row.
// scratch: span_scratch_floats(p, max R) floats, 64-byte aligned.
// Keys at or past prefetch_limit are not prefetched (they belong to another work item).
void attend_span(const AttentionParams& p, int seq, int64_t total, const HeadWork* heads, int num_heads,
                 int64_t span_begin, int64_t prefetch_limit, float* scratch);

// Prefetches (towards L2) tile [t0, t0 + kKvTile) of KV heads [head_begin, head_end) of sequence seq, head by
// head in the order the tile routine reads them: the first tile of a work item, which no earlier tile
// prefetched (measured: f16 decode at 8k, batch 1, 2-4 % faster).
void prefetch_tile(const AttentionParams& p, int seq, int head_begin, int head_end, int64_t t0, int64_t total);

// The first and one-past-last span index any query of qs sees.
void span_range(const QuerySet& qs, int64_t* first, int64_t* last);

// Gathers the query heads [h0, h0 + G) of token `row` into dst ([G, padded_dim(head_dim)]) rotated.
void gather_query_heads(const AttentionParams& p, const RopeTable& rope, int64_t row, int h0, int num_heads,
                        float* dst);

// The phases of cpu::attention, over the sequences listed (tables built by the caller).
void append_rows(const AttentionParams& p, const RopeTable& rope);
void run_context(const AttentionParams& p, const std::vector<int>& seqs, const RopeTable& rope);
void run_decode(const AttentionParams& p, const std::vector<int>& seqs, const RopeTable& rope);

// Aborts with file:line on a broken contract (head dims, group, quant group).
void check_params(const AttentionParams& p, const char* file, int line);

}  // namespace inflight::kernels::cpu

// ScheduledBatch: the packed (no padding) batch of one step, from the scheduler to Model::forward.
// TensorRT-LLM's order: every context (prefill) sequence first, then every generation sequence.
#pragma once
#include <cstdint>
#include <vector>

namespace inflight::engine {

struct ScheduledBatch {
  // Per token.
  std::vector<int32_t> token_ids;     // [num_tokens]
  std::vector<int32_t> positions;     // [num_tokens]
  std::vector<int64_t> slot_mapping;  // [num_tokens] KV cache slot (block * block_size + offset)
  // Per sequence.
  std::vector<int32_t> q_start;       // [num_seqs + 1] cu_seqlens into the tokens
  std::vector<int32_t> past_len;      // [num_seqs] tokens already in the cache before this step
  std::vector<int32_t> block_tables;  // [num_seqs, max_blocks_per_seq], -1 padded
  int max_blocks_per_seq = 0;
  int num_context_seqs = 0;           // sequences [0, num_context_seqs) are in the context phase
  // Beam search (empty when no sequence of the step is a beam): per sequence, the row of beam 0 of its
  // group and its cache indirection row (beam that wrote each position); see kernels::AttentionParams.
  std::vector<int32_t> beam_row0;     // [num_seqs]
  std::vector<int32_t> cache_indir;   // [num_seqs, cache_indir_stride]
  int64_t cache_indir_stride = 0;
  // Token rows whose logits the step returns, in this order (usually each sequence's last row).
  std::vector<int32_t> logits_rows;

  int num_tokens() const { return int(token_ids.size()); }
  int num_seqs() const { return int(past_len.size()); }

  // Appends one sequence: tokens[i] at position past + i, slots from its block table.
  // `blocks` must cover positions [0, past + tokens.size()).
  void add_sequence(const int32_t* tokens, int num_new, int past, const int32_t* blocks, int num_blocks,
                    int block_size, bool want_logits);

  // Tokens [begin, end) as a batch of their own: each sequence's share of them, its past length advanced
  // over its tokens before `begin`, and the logits rows inside the range, renumbered. The beam fields are
  // not carried: only for batches without beams.
  ScheduledBatch token_range(int begin, int end) const;
};

}  // namespace inflight::engine

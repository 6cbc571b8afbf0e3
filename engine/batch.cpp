#include "engine/batch.h"

#include <algorithm>
#include <cstddef>

namespace inflight::engine {

void ScheduledBatch::add_sequence(const int32_t* tokens, int num_new, int past, const int32_t* blocks, int num_blocks,
                                  int block_size, bool want_logits) {
  if (q_start.empty()) q_start.push_back(0);
  for (int i = 0; i < num_new; ++i) {
    const int64_t pos = int64_t(past) + i;
    token_ids.push_back(tokens[i]);
    positions.push_back(int32_t(pos));
    slot_mapping.push_back(int64_t(blocks[pos / block_size]) * block_size + pos % block_size);
  }
  if (want_logits && num_new > 0) logits_rows.push_back(int32_t(token_ids.size()) - 1);
  q_start.push_back(int32_t(token_ids.size()));
  past_len.push_back(past);
  // Re-pad the block table rows when this sequence has more blocks than any before it.
  if (num_blocks > max_blocks_per_seq) {
    std::vector<int32_t> wider(std::size_t(num_seqs() - 1) * std::size_t(num_blocks), -1);
    for (int s = 0; s + 1 < num_seqs(); ++s)
      for (int b = 0; b < max_blocks_per_seq; ++b)
        wider[std::size_t(s) * num_blocks + b] = block_tables[std::size_t(s) * max_blocks_per_seq + b];
    block_tables = std::move(wider);
    max_blocks_per_seq = num_blocks;
  }
  for (int b = 0; b < max_blocks_per_seq; ++b) block_tables.push_back(b < num_blocks ? blocks[b] : -1);
}

ScheduledBatch ScheduledBatch::token_range(int begin, int end) const {
  ScheduledBatch part;
  part.token_ids.assign(token_ids.begin() + begin, token_ids.begin() + end);
  part.positions.assign(positions.begin() + begin, positions.begin() + end);
  part.slot_mapping.assign(slot_mapping.begin() + begin, slot_mapping.begin() + end);
  part.max_blocks_per_seq = max_blocks_per_seq;
  part.q_start.push_back(0);
  for (int s = 0; s < num_seqs(); ++s) {
    const int lo = std::max(q_start[std::size_t(s)], begin), hi = std::min(q_start[std::size_t(s) + 1], end);
    if (lo >= hi) continue;
    part.q_start.push_back(hi - begin);
    part.past_len.push_back(past_len[std::size_t(s)] + (lo - q_start[std::size_t(s)]));
    const auto row = block_tables.begin() + std::ptrdiff_t(s) * max_blocks_per_seq;
    part.block_tables.insert(part.block_tables.end(), row, row + max_blocks_per_seq);
    if (s < num_context_seqs) ++part.num_context_seqs;
  }
  for (int32_t r : logits_rows)
    if (r >= begin && r < end) part.logits_rows.push_back(r - begin);
  return part;
}

}  // namespace inflight::engine

// Context-phase (prefill) attention: flash-style over the paged cache. Work items are (sequence,
// KV head, tile of query rows); each gathers its rows' G query heads (rotated), then folds the spans
// and tiles its rows can see (attend_span), keeping one online-softmax state per query and never a
// score matrix larger than a tile. Earlier chunks of a chunked prefill are simply cached keys.
#include <algorithm>
#include <vector>

#include "kernels/cpu/attention_driver.h"
#include "kernels/thread_pool.h"

namespace inflight::kernels::cpu {

namespace {

// One work item: up to 16 query rows of one sequence, all G query heads of one KV head.
struct RowTile {
  int seq;            // sequence index in the batch
  int kv_head;
  int64_t row_begin;  // packed query rows [row_begin, row_end)
  int64_t row_end;
};

void attend_row_tile(const AttentionParams& p, const RopeTable& rope, const RowTile& tile) {
  const int G = p.num_q_heads / p.num_kv_heads;
  const int s = tile.seq, h = tile.kv_head;
  const int num_rows = int(tile.row_end - tile.row_begin);
  const int R = num_rows * G;
  const int pdim = padded_dim(p.head_dim), pdim_v = padded_dim(p.head_dim_v);
  const int64_t past = p.past_len[s];
  const int64_t total = past + (p.q_start[s + 1] - p.q_start[s]);

  float* buf = thread_workspace().get(int64_t(R) * (pdim + 2 * pdim_v) + span_scratch_floats(p, R) + 16);
  float* q = buf;                                  // [R, pdim]
  float* row_o = q + int64_t(R) * pdim;            // [R, pdim_v]
  float* span_o = row_o + int64_t(R) * pdim_v;     // [R, pdim_v]
  float* scratch = span_o + int64_t(R) * pdim_v;   // span scratch, 64-byte aligned (R * pdim... are multiples of 16)

  // The rows' queries and outputs (both cold: in L3 or further) asked for at once, so their misses overlap
  // (SmolLM f16 prefill: attention 3-9 % faster, alternating runs).
  const int64_t out_stride = int64_t(p.num_q_heads) * p.head_dim_v;
  const int64_t q_bytes = int64_t(G) * p.head_dim * int64_t(sizeof(float));
  const int64_t o_bytes = int64_t(G) * p.head_dim_v * int64_t(sizeof(float));
  for (int64_t row = tile.row_begin; row < tile.row_end; ++row) {
    const char* qrow = reinterpret_cast<const char*>(p.q + row * p.q_stride + int64_t(h * G) * p.head_dim);
    const char* orow = reinterpret_cast<const char*>(p.out + row * out_stride + int64_t(h * G) * p.head_dim_v);
    for (int64_t b = 0; b < q_bytes; b += 64) __builtin_prefetch(qrow + b, 0, 3);
    for (int64_t b = 0; b < o_bytes; b += 64) __builtin_prefetch(orow + b, 1, 3);
  }
  QuerySet qs;
  qs.num = R;
  qs.q = q;
  for (int i = 0; i < num_rows; ++i) {
    const int64_t row = tile.row_begin + i;
    const int64_t i_seq = row - p.q_start[s];  // the row's index among the sequence's rows
    gather_query_heads(p, rope, row, h * G, G, q + int64_t(i) * G * pdim);
    int64_t lo, hi;
    visible_keys(p, past + i_seq, total, &lo, &hi);
    for (int g = 0; g < G; ++g) {
      qs.lo[i * G + g] = lo;
      qs.hi[i * G + g] = hi;
      qs.mask_key0[i * G + g] = mask_key0(p, s, h * G + g, i_seq);
    }
  }

  SoftmaxState row_states[kMaxTileQueries], span_states[kMaxTileQueries];
  reset_states(row_states, R, row_o, pdim_v);
  int64_t first, last;
  span_range(qs, &first, &last);
  // Keys past the last one any row sees are left out of the tiles (a query's scores and sums do not depend
  // on them; attention_tile.h): the diagonal tiles then score up to the rows' last key, not the chunk's.
  const int64_t seen = std::min(total, *std::max_element(qs.hi, qs.hi + R));
  // A single span folds straight into the (empty) row states: merging a span state into an empty state copies it.
  const bool one_span = last - first == 1;
  for (int64_t sp = first; sp < last; ++sp) {
    if (!one_span) reset_states(span_states, R, span_o, pdim_v);
    const HeadWork work{h, &qs, one_span ? row_states : span_states};
    attend_span(p, s, seen, &work, 1, sp * kKvSpan, seen, scratch);
    if (!one_span)
      for (int r = 0; r < R; ++r) merge_state(row_states[r], span_states[r], pdim_v);
  }

  for (int i = 0; i < num_rows; ++i)
    for (int g = 0; g < G; ++g)
      write_state(row_states[i * G + g], p.out + (tile.row_begin + i) * out_stride + int64_t(h * G + g) * p.head_dim_v,
                  p.head_dim_v);
}

}  // namespace

void run_context(const AttentionParams& p, const std::vector<int>& seqs, const RopeTable& rope) {
  const int G = p.num_q_heads / p.num_kv_heads;
  const int rows_per_tile = std::max(1, std::min(16, kMaxTileQueries / G));
  std::vector<RowTile> tiles;
  for (int s : seqs)
    for (int h = 0; h < p.num_kv_heads; ++h)
      for (int64_t r = p.q_start[s]; r < p.q_start[s + 1]; r += rows_per_tile)
        tiles.push_back({s, h, r, std::min<int64_t>(r + rows_per_tile, p.q_start[s + 1])});
  // Later rows see more keys: hand them out first so the long items do not finish last.
  std::stable_sort(tiles.begin(), tiles.end(), [&](const RowTile& a, const RowTile& b) {
    return a.row_end - p.q_start[a.seq] + p.past_len[a.seq] > b.row_end - p.q_start[b.seq] + p.past_len[b.seq];
  });
  compute_pool().run(int64_t(tiles.size()), [&](int64_t i) { attend_row_tile(p, rope, tiles[size_t(i)]); });
}

void context_attention(const AttentionParams& p, int seq_begin, int seq_end) {
  check_params(p, __FILE__, __LINE__);
  std::vector<int> seqs;
  for (int s = seq_begin; s < seq_end; ++s)
    if (p.q_start[s + 1] > p.q_start[s]) seqs.push_back(s);
  RopeTable rope;
  rope.build(p, p.q_start[seq_begin], p.q_start[seq_end]);
  run_context(p, seqs, rope);
}

}  // namespace inflight::kernels::cpu

// Generation-phase attention: one query row per sequence, all G query heads of a KV head served by one
// pass over that head's keys (one QuerySet of G queries). Work items are (sequence, KV head); when there
// are fewer of them than threads, each item's spans become separate items (split-K, flash-decoding)
// whose span states are folded afterwards in key order - the same fold the one-item plan does, so both
// plans give the same bits. Past steps are read through the beam cache indirection when given.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/cpu/attention_driver.h"
#include "kernels/thread_pool.h"

namespace inflight::kernels::cpu {

namespace {

// The G queries of sequence s's single row for KV head h, gathered into q ([G, pdim]).
QuerySet decode_queries(const AttentionParams& p, const RopeTable& rope, int s, int h, float* q, int64_t* total) {
  const int G = p.num_q_heads / p.num_kv_heads;
  const int64_t row = p.q_start[s];
  const int64_t pos = p.past_len[s];
  *total = pos + 1;
  QuerySet qs;
  qs.num = G;
  qs.q = q;
  gather_query_heads(p, rope, row, h * G, G, q);
  int64_t lo, hi;
  visible_keys(p, pos, *total, &lo, &hi);
  for (int g = 0; g < G; ++g) {
    qs.lo[g] = lo;
    qs.hi[g] = hi;
    qs.mask_key0[g] = mask_key0(p, s, h * G + g, 0);
  }
  return qs;
}

float* out_head(const AttentionParams& p, int s, int head) {
  return p.out + int64_t(p.q_start[s]) * p.num_q_heads * p.head_dim_v + int64_t(head) * p.head_dim_v;
}

// One (sequence, KV head), all spans in order.
void decode_item(const AttentionParams& p, const RopeTable& rope, int s, int h) {
  const int G = p.num_q_heads / p.num_kv_heads;
  const int pdim = padded_dim(p.head_dim), pdim_v = padded_dim(p.head_dim_v);
  float* buf = thread_workspace().get(int64_t(G) * (pdim + 2 * pdim_v) + span_scratch_floats(p, G) + 16);
  float* q = buf;                                 // [G, pdim]
  float* row_o = q + int64_t(G) * pdim;           // [G, pdim_v]
  float* span_o = row_o + int64_t(G) * pdim_v;    // [G, pdim_v]
  float* scratch = span_o + int64_t(G) * pdim_v;
  int64_t total;
  const QuerySet qs = decode_queries(p, rope, s, h, q, &total);
  SoftmaxState row_states[kMaxTileQueries], span_states[kMaxTileQueries];
  for (int g = 0; g < G; ++g) {
    row_states[g].o = row_o + int64_t(g) * pdim_v;
    span_states[g].o = span_o + int64_t(g) * pdim_v;
    reset_state(row_states[g], pdim_v);
  }
  int64_t first, last;
  span_range(qs, &first, &last);
  for (int64_t sp = first; sp < last; ++sp) {
    for (int g = 0; g < G; ++g) reset_state(span_states[g], pdim_v);
    attend_span(p, s, h, total, qs, sp * kKvSpan, span_states, scratch);
    for (int g = 0; g < G; ++g) merge_state(row_states[g], span_states[g], pdim_v);
  }
  for (int g = 0; g < G; ++g) write_state(row_states[g], out_head(p, s, h * G + g), p.head_dim_v);
}

// One span of one (sequence, KV head): writes G states to part ([G, pdim_v + 2]: o, then m, d).
void decode_span(const AttentionParams& p, const RopeTable& rope, int s, int h, int64_t span, float* part) {
  const int G = p.num_q_heads / p.num_kv_heads;
  const int pdim = padded_dim(p.head_dim), pdim_v = padded_dim(p.head_dim_v);
  float* buf = thread_workspace().get(int64_t(G) * pdim + span_scratch_floats(p, G) + 16);
  float* q = buf;  // [G, pdim]
  float* scratch = q + int64_t(G) * pdim;
  int64_t total;
  const QuerySet qs = decode_queries(p, rope, s, h, q, &total);
  SoftmaxState states[kMaxTileQueries];
  for (int g = 0; g < G; ++g) {
    states[g].o = part + int64_t(g) * (pdim_v + 2);
    reset_state(states[g], pdim_v);
  }
  attend_span(p, s, h, total, qs, span * kKvSpan, states, scratch);
  for (int g = 0; g < G; ++g) {
    part[int64_t(g) * (pdim_v + 2) + pdim_v] = states[g].m;
    part[int64_t(g) * (pdim_v + 2) + pdim_v + 1] = states[g].d;
  }
}

}  // namespace

void run_decode(const AttentionParams& p, const std::vector<int>& seqs, const RopeTable& rope) {
  const int Nkv = p.num_kv_heads;
  const int64_t num_items = int64_t(seqs.size()) * Nkv;
  ThreadPool& pool = compute_pool();
  if (num_items >= pool.num_threads()) {
    pool.run(num_items, [&](int64_t i) { decode_item(p, rope, seqs[size_t(i / Nkv)], int(i % Nkv)); });
    return;
  }

  // Split-K: one task per (sequence, KV head, span it sees), then a fold per (sequence, KV head).
  const int G = p.num_q_heads / Nkv;
  const int pdim_v = padded_dim(p.head_dim_v);
  struct SpanTask {
    int seq_index;
    int kv_head;
    int64_t span;
  };
  std::vector<SpanTask> tasks;
  std::vector<int64_t> first_task(size_t(num_items) + 1, 0);  // [num_items + 1] into tasks
  for (int64_t i = 0; i < num_items; ++i) {
    const int s = seqs[size_t(i / Nkv)];
    int64_t lo, hi;
    visible_keys(p, p.past_len[s], p.past_len[s] + 1, &lo, &hi);
    if (lo < hi)
      for (int64_t sp = lo / kKvSpan; sp * kKvSpan < hi; ++sp) tasks.push_back({int(i / Nkv), int(i % Nkv), sp});
    first_task[size_t(i) + 1] = int64_t(tasks.size());
  }
  const int64_t part_floats = int64_t(G) * (pdim_v + 2);
  std::vector<float> parts(size_t(tasks.size()) * size_t(part_floats));  // [num_tasks, G, pdim_v + 2]
  pool.run(int64_t(tasks.size()), [&](int64_t t) {
    const SpanTask& task = tasks[size_t(t)];
    decode_span(p, rope, seqs[size_t(task.seq_index)], task.kv_head, task.span, &parts[size_t(t * part_floats)]);
  });
  pool.run(num_items, [&](int64_t i) {
    const int s = seqs[size_t(i / Nkv)], h = int(i % Nkv);
    std::vector<float> row_o(size_t(G) * pdim_v);  // [G, pdim_v]
    for (int g = 0; g < G; ++g) {
      SoftmaxState row{&row_o[size_t(g) * pdim_v], 0.0f, 0.0f};
      reset_state(row, pdim_v);
      for (int64_t t = first_task[size_t(i)]; t < first_task[size_t(i) + 1]; ++t) {
        float* part = &parts[size_t(t * part_floats + g * (pdim_v + 2))];
        merge_state(row, SoftmaxState{part, part[pdim_v], part[pdim_v + 1]}, pdim_v);
      }
      write_state(row, out_head(p, s, h * G + g), p.head_dim_v);
    }
  });
}

void decode_attention(const AttentionParams& p, int seq_begin, int seq_end) {
  check_params(p, __FILE__, __LINE__);
  std::vector<int> seqs;
  for (int s = seq_begin; s < seq_end; ++s) {
    const int q_len = p.q_start[s + 1] - p.q_start[s];
    if (q_len > 1) {
      std::fprintf(stderr, "%s:%d: decode_attention: sequence %d has %d query rows (1 expected)\n", __FILE__,
                   __LINE__, s, q_len);
      std::abort();
    }
    if (q_len == 1) seqs.push_back(s);
  }
  RopeTable rope;
  rope.build(p, p.q_start[seq_begin], p.q_start[seq_end]);
  run_decode(p, seqs, rope);
}

void attention(const AttentionParams& p) {
  check_params(p, __FILE__, __LINE__);
  RopeTable rope;
  rope.build(p, 0, p.num_tokens());
  append_rows(p, rope);
  std::vector<int> context, generation;
  for (int s = 0; s < p.num_seqs; ++s) {
    const int q_len = p.q_start[s + 1] - p.q_start[s];
    if (q_len == 1) generation.push_back(s);
    else if (q_len > 1) context.push_back(s);
  }
  if (!context.empty()) run_context(p, context, rope);
  if (!generation.empty()) run_decode(p, generation, rope);
}

}  // namespace inflight::kernels::cpu

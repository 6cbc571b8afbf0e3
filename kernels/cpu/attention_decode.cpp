// Generation-phase attention: one query row per sequence. A work item is a sequence, or, when there are
// too few sequences to keep every thread busy and enough keys to share, one 512-key span of a sequence for
// a group of its KV heads (split-K, flash-decoding). An item serves each of its KV heads with all G query
// heads of that head in one QuerySet, so one pass reads each head's keys once; with every head in the
// item, the blocks of the next tile are prefetched front to back. Span items leave their states in a
// buffer; the item that finishes a sequence's last outstanding span folds them per query head in key
// order - the same fold a whole-sequence item does, so both plans give the same bits (and a sequence the
// split plan would give one item anyway runs as a whole-sequence item).
// Past steps are read through the beam cache indirection when given.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "kernels/cpu/attention_driver.h"
#include "kernels/thread_pool.h"

namespace inflight::kernels::cpu {

namespace {

// Items per thread below which sequences are split into spans (balance: a sequence is a big item).
constexpr int64_t kMinItemsPerThread = 4;
// Split items per thread (whole span ranges): one, as each item starts on a tile no earlier tile prefetched
// (measured at 8k, batch 1, f16: 1 item per thread about 1.5 % faster than 2, 4 slower than 2).
constexpr int64_t kSplitItemsPerThread = 1;
// Key rows (visible keys times KV heads, all sequences) up to which a step is not split at all: one item per
// sequence. Below it a split item's handoff and the odd head left over (SmolLM: 3 KV heads on 2 threads)
// cost more than the work saved (SmolLM Q4_K_M decode, 2 threads, 256 tokens after a short prompt,
// medians of 7 alternating runs: 212.3 against 203.8 tok/s; after a 511-token prompt 180.7 against 179.3,
// and 175.7 with no split at all).
constexpr int64_t kMinKeyRowsToSplit = 2048;

struct DecodeItem {
  int seq;
  int64_t span_first;  // spans [span_first, span_last) of the sequence
  int64_t span_last;
  int head_begin;      // KV heads [head_begin, head_end)
  int head_end;
  int64_t part;        // partial-state slot of span_first (split items), -1 for a whole sequence
  int fold;            // split items: the sequence's index in FoldPlan
};

// The split sequences of one call: where their partial states lie, and how many items of each are still
// running (the item that takes a count to zero folds that sequence).
struct FoldPlan {
  std::vector<int> seqs;                        // [folded] sequence
  std::vector<int64_t> first_part;              // [folded + 1] first partial slot of each, then the end
  std::unique_ptr<std::atomic<int>[]> pending;  // [folded] items not yet done
};

// The query heads of KV heads [h0, h1) of sequence s's row, one QuerySet per KV head: q ([(h1 - h0) G,
// pdim]) and qs ([h1 - h0]).
void decode_queries(const AttentionParams& p, const RopeTable& rope, int s, int h0, int h1, float* q,
                    std::vector<QuerySet>* qs) {
  const int G = p.num_q_heads / p.num_kv_heads;
  const int64_t row = p.q_start[s], pos = p.past_len[s];
  gather_query_heads(p, rope, row, h0 * G, (h1 - h0) * G, q);
  int64_t lo, hi;
  visible_keys(p, pos, pos + 1, &lo, &hi);
  qs->resize(size_t(h1 - h0));
  for (int h = h0; h < h1; ++h) {
    QuerySet& set = (*qs)[size_t(h - h0)];
    set.num = G;
    set.q = q + int64_t(h - h0) * G * padded_dim(p.head_dim);
    for (int g = 0; g < G; ++g) {
      set.lo[g] = lo;
      set.hi[g] = hi;
      set.mask_key0[g] = mask_key0(p, s, h * G + g, 0);
    }
  }
}

float* out_head(const AttentionParams& p, int s, int head) {
  return p.out + int64_t(p.q_start[s]) * p.num_q_heads * p.head_dim_v + int64_t(head) * p.head_dim_v;
}

// Folds the span states of split sequence f, per query head in key order, into its output rows.
void fold_sequence(const AttentionParams& p, const FoldPlan& folds, size_t f, float* parts) {
  const int Nq = p.num_q_heads, pdim_v = padded_dim(p.head_dim_v);
  const int64_t stride = pdim_v + 2;  // floats per partial state
  SoftmaxState row{thread_workspace().get(pdim_v), 0.0f, 0.0f};  // the finished item is done with it
  for (int n = 0; n < Nq; ++n) {
    reset_state(row, pdim_v);
    for (int64_t t = folds.first_part[f]; t < folds.first_part[f + 1]; ++t) {
      float* part = parts + (t * Nq + n) * stride;
      merge_state(row, SoftmaxState{part, part[pdim_v], part[pdim_v + 1]}, pdim_v);
    }
    write_state(row, out_head(p, folds.seqs[f], n), p.head_dim_v);
  }
}

// Runs one item. Whole sequence: folds span states into row states and writes the output. Split: writes
// the spans' states to parts ([slots, Nq, pdim_v + 2]: o, then m, d), and folds the sequence if it is the
// last of its items to finish.
void decode_item(const AttentionParams& p, const RopeTable& rope, const DecodeItem& item, const FoldPlan& folds,
                 float* parts) {
  const int Nq = p.num_q_heads, G = Nq / p.num_kv_heads;
  const int Nkv = item.head_end - item.head_begin;  // this item's KV heads
  const int n0 = item.head_begin * G;               // its first query head
  const int pdim = padded_dim(p.head_dim), pdim_v = padded_dim(p.head_dim_v);
  const int64_t stride = pdim_v + 2;  // floats per partial state
  float* buf = thread_workspace().get(int64_t(Nq) * (pdim + 2 * pdim_v) + span_scratch_floats(p, G) + 16);
  float* q = buf;                                 // [Nq, pdim]
  float* row_o = q + int64_t(Nq) * pdim;          // [Nq, pdim_v]
  float* span_o = row_o + int64_t(Nq) * pdim_v;   // [Nq, pdim_v]
  float* scratch = span_o + int64_t(Nq) * pdim_v;
  thread_local std::vector<QuerySet> qs;
  thread_local std::vector<SoftmaxState> row_states, span_states;  // [Nq]
  thread_local std::vector<HeadWork> work;                         // [Nkv]
  const int64_t total = p.past_len[item.seq] + 1;
  prefetch_tile(p, item.seq, item.head_begin, item.head_end, item.span_first * kKvSpan, total);
  decode_queries(p, rope, item.seq, item.head_begin, item.head_end, q, &qs);
  const int num = Nkv * G;  // query heads of the item
  row_states.resize(size_t(num));
  span_states.resize(size_t(num));
  work.resize(size_t(Nkv));
  reset_states(row_states.data(), num, row_o, pdim_v);
  for (int h = 0; h < Nkv; ++h) work[size_t(h)] = {item.head_begin + h, &qs[size_t(h)], &span_states[size_t(h) * G]};
  for (int64_t sp = item.span_first; sp < item.span_last; ++sp) {
    float* part = item.part >= 0 ? parts + ((item.part + sp - item.span_first) * Nq + n0) * stride : nullptr;
    for (int n = 0; n < num; ++n) {
      span_states[size_t(n)].o = part != nullptr ? part + n * stride : span_o + int64_t(n) * pdim_v;
      reset_state(span_states[size_t(n)], pdim_v);
    }
    attend_span(p, item.seq, total, work.data(), Nkv, sp * kKvSpan, item.span_last * kKvSpan, scratch);
    for (int n = 0; n < num; ++n) {
      if (part != nullptr) {
        part[n * stride + pdim_v] = span_states[size_t(n)].m;
        part[n * stride + pdim_v + 1] = span_states[size_t(n)].d;
      } else {
        merge_state(row_states[size_t(n)], span_states[size_t(n)], pdim_v);
      }
    }
  }
  if (item.part < 0) {
    for (int n = 0; n < num; ++n) write_state(row_states[size_t(n)], out_head(p, item.seq, n0 + n), p.head_dim_v);
  } else if (folds.pending[size_t(item.fold)].fetch_sub(1, std::memory_order_acq_rel) == 1) {
    fold_sequence(p, folds, size_t(item.fold), parts);  // acquire: the other items' states are visible
  }
}

}  // namespace

void run_decode(const AttentionParams& p, const std::vector<int>& seqs, const RopeTable& rope) {
  const int Nq = p.num_q_heads;
  const int pdim_v = padded_dim(p.head_dim_v);
  ThreadPool& pool = compute_pool();
  const int Nkv = p.num_kv_heads;
  const int64_t target = kMinItemsPerThread * pool.num_threads();
  std::vector<int64_t> span_lo, span_hi;  // [seqs] spans each sequence sees
  int64_t num_spans = 0, num_keys = 0;
  for (int s : seqs) {
    int64_t lo, hi;
    visible_keys(p, p.past_len[s], p.past_len[s] + 1, &lo, &hi);
    span_lo.push_back(lo < hi ? lo / kKvSpan : 0);
    span_hi.push_back(lo < hi ? (hi + kKvSpan - 1) / kKvSpan : 0);
    num_spans += span_hi.back() - span_lo.back();
    num_keys += std::max<int64_t>(0, hi - lo);
  }
  const bool split = int64_t(seqs.size()) < target && num_keys * Nkv > kMinKeyRowsToSplit;
  // Split items: (sequence, span, group of KV heads), heads grouped only as far as needed for
  // kSplitItemsPerThread items per thread (measured at 512 keys, batch 1: 2 items of 4 heads 11-16 % faster
  // than 8 of 1, each of which starts on a cold tile).
  const int64_t split_target = kSplitItemsPerThread * pool.num_threads();
  const int num_groups =
      split ? int(std::clamp<int64_t>((split_target + num_spans - 1) / std::max<int64_t>(1, num_spans), 1, Nkv)) : 1;
  // Consecutive spans stay in one item, kSplitItemsPerThread items per thread: a thread then streams through
  // its keys with the next tile prefetched, instead of starting cold at every span.
  const int64_t chunk = std::max<int64_t>(1, num_spans * num_groups / (kSplitItemsPerThread * pool.num_threads()));
  std::vector<DecodeItem> items;
  FoldPlan folds;  // sequences split over several items
  std::vector<int> num_items;  // [folded]
  int64_t num_parts = 0;
  for (size_t k = 0; k < seqs.size(); ++k) {
    // Items that see all of a sequence's spans (each for its group of heads) write their rows directly.
    if (!split || span_hi[k] - span_lo[k] <= chunk) {
      const int groups = split ? num_groups : 1;
      for (int g = 0; g < groups; ++g)
        items.push_back({seqs[k], span_lo[k], span_hi[k], g * Nkv / groups, (g + 1) * Nkv / groups, -1, -1});
      continue;
    }
    const int f = int(folds.seqs.size());
    folds.seqs.push_back(seqs[k]);
    folds.first_part.push_back(num_parts);
    num_items.push_back(0);
    for (int64_t sp = span_lo[k]; sp < span_hi[k]; sp += chunk)
      for (int g = 0; g < num_groups; ++g, ++num_items.back())
        items.push_back({seqs[k], sp, std::min(sp + chunk, span_hi[k]), g * Nkv / num_groups, (g + 1) * Nkv / num_groups,
                         num_parts + sp - span_lo[k], f});
    num_parts += span_hi[k] - span_lo[k];
  }
  folds.first_part.push_back(num_parts);
  folds.pending.reset(new std::atomic<int>[num_items.size()]);
  for (size_t f = 0; f < num_items.size(); ++f) folds.pending[f].store(num_items[f], std::memory_order_relaxed);
  const int64_t stride = pdim_v + 2;
  // [num_parts, Nq, pdim_v + 2], every slot written by its item. Kept across calls: a fresh vector of this
  // size is an mmap, page faults and a memset every step.
  // NOTE: the lambdas use `parts`, not `buffer`: a thread_local named in a lambda is the running thread's.
  thread_local std::vector<float> buffer;
  if (buffer.size() < size_t(num_parts * Nq * stride)) buffer.resize(size_t(num_parts * Nq * stride));
  float* parts = buffer.data();
  pool.run(int64_t(items.size()), [&](int64_t i) { decode_item(p, rope, items[size_t(i)], folds, parts); });
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

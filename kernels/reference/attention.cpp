// Reference attention: per query row and head, every visible key scored, softmax, weighted sum of V.
// Plain float loops in llama2.c's order; the oracle the fused kernels are tested against.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/attention_params.h"
#include "kernels/thread_pool.h"

namespace inflight::kernels::reference {

namespace {

// Keys [lo, hi] visible from position `pos` in a sequence of `total` cached tokens.
void visible_range(const AttentionParams& p, int64_t pos, int64_t total, int64_t* lo, int64_t* hi) {
  *lo = p.pre_tokens < 0 ? 0 : std::max<int64_t>(0, pos - p.pre_tokens);
  *hi = p.next_tokens < 0 ? total - 1 : std::min<int64_t>(total - 1, pos + p.next_tokens);
}

void attend_row(const AttentionParams& p, int seq, int64_t row, int64_t pos, int64_t total, int head,
                std::vector<float>& scores) {
  const PagedKvView& kv = p.kv;
  const int group = p.num_q_heads / p.num_kv_heads;
  const int kv_head = head / group;
  const float* q = p.q + row * p.q_stride + int64_t(head) * p.head_dim;
  float* out = p.out + row * int64_t(p.num_q_heads) * p.head_dim_v + int64_t(head) * p.head_dim_v;

  int64_t lo, hi;
  visible_range(p, pos, total, &lo, &hi);
  if (hi < lo) {
    std::fill(out, out + p.head_dim_v, 0.0f);
    return;
  }
  scores.resize(size_t(hi - lo + 1));
  float max_score = -INFINITY;
  for (int64_t j = lo; j <= hi; ++j) {
    const int64_t k_off = kv.offset(kv.block_of(p.kv_seq(seq, j), j), 0, kv_head, int(j % kv.block_size));
    float s = 0.0f;
    for (int d = 0; d < p.head_dim; ++d) s += q[d] * kv_load(kv.dtype, kv.data, k_off + d);
    s *= p.scale;
    if (p.softcap > 0.0f) s = p.softcap * std::tanh(s / p.softcap);
    scores[size_t(j - lo)] = s;
    max_score = std::max(max_score, s);
  }
  float sum = 0.0f;
  for (float& s : scores) {
    s = std::exp(s - max_score);
    sum += s;
  }
  for (float& s : scores) s /= sum;

  std::fill(out, out + p.head_dim_v, 0.0f);
  for (int64_t j = lo; j <= hi; ++j) {
    const int64_t v_off = kv.offset(kv.block_of(p.kv_seq(seq, j), j), 1, kv_head, int(j % kv.block_size));
    const float a = scores[size_t(j - lo)];
    for (int d = 0; d < p.head_dim_v; ++d) out[d] += a * kv_load(kv.dtype, kv.data, v_off + d);
  }
}

}  // namespace

void attention(const AttentionParams& p) {
  // One task per (sequence, query row, head); rows of a sequence are positions past_len + i.
  const int64_t num_rows = p.q_start[p.num_seqs];
  std::vector<int> seq_of_row(static_cast<size_t>(num_rows));
  for (int s = 0; s < p.num_seqs; ++s)
    for (int64_t r = p.q_start[s]; r < p.q_start[s + 1]; ++r) seq_of_row[size_t(r)] = s;

  compute_pool().parallel_for(num_rows * p.num_q_heads, 16, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t row = task / p.num_q_heads;
      const int head = int(task % p.num_q_heads);
      const int seq = seq_of_row[size_t(row)];
      const int64_t q_len = p.q_start[seq + 1] - p.q_start[seq];
      const int64_t pos = p.past_len[seq] + (row - p.q_start[seq]);
      attend_row(p, seq, row, pos, p.past_len[seq] + q_len, head, scores);
    }
  });
}

}  // namespace inflight::kernels::reference

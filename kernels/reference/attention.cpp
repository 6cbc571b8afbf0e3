// Reference attention: per query row and head, every visible key scored, softmax, weighted sum of V.
// Plain float loops in llama2.c's order; the oracle the fused kernels are tested against. RoPE and the
// append go through the model's own ops (apply_rope on copies, append_kv), values through kv_dtype.h.
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

// The step's K rotated like the model did before the fused append existed: apply_rope on a copy.
std::vector<float> rotated_copy(const AttentionParams& p, const float* x, int64_t stride, int num_heads) {
  const int64_t T = p.num_tokens();
  std::vector<float> out(size_t(T * stride));  // [T, stride]
  for (int64_t t = 0; t < T; ++t) std::copy(x + t * stride, x + t * stride + num_heads * p.head_dim, &out[size_t(t * stride)]);
  if (p.rope_on()) {
    RopeParams rope = p.rope;
    rope.head_dim = p.head_dim;
    apply_rope(rope, out.data(), stride, num_heads, p.positions, T);
  }
  return out;
}

void attend_row(const AttentionParams& p, const float* q_rows, int64_t q_stride, int seq, int64_t row, int64_t i_seq,
                int64_t pos, int64_t total, int head, std::vector<float>& scores) {
  const PagedKvView& kv = p.kv;
  const int group = p.num_q_heads / p.num_kv_heads;
  const int kv_head = head / group;
  const float* q = q_rows + row * q_stride + int64_t(head) * p.head_dim;
  float* out = p.out + row * int64_t(p.num_q_heads) * p.head_dim_v + int64_t(head) * p.head_dim_v;
  const float scale = p.effective_scale();
  const int64_t mask_base = int64_t(seq) * p.mask.seq_stride + int64_t(head) * p.mask.head_stride + i_seq * p.mask.row_stride;

  int64_t lo, hi;
  visible_range(p, pos, total, &lo, &hi);
  std::fill(out, out + p.head_dim_v, 0.0f);
  if (hi < lo) return;
  scores.resize(size_t(hi - lo + 1));
  float max_score = -INFINITY;
  for (int64_t j = lo; j <= hi; ++j) {
    const int64_t block = kv.block_of(p.kv_seq(seq, j), j);
    const int slot = int(j % kv.block_size);
    const void* k = kv.row(block, 0, kv_head, slot);
    const KvRowScales ks = kv.row_scales(block, 0, kv_head, slot);
    float s = 0.0f;
    for (int d = 0; d < p.head_dim; ++d) s += q[d] * kv_dequantize(kv.dtype, k, d, ks);
    s *= scale;
    if (p.softcap > 0.0f) s = p.softcap * std::tanh(s / p.softcap);
    if (p.mask.kind == MaskKind::Bool && static_cast<const uint8_t*>(p.mask.data)[mask_base + j] != 0) s = -INFINITY;
    if (p.mask.kind == MaskKind::Additive) s += static_cast<const float*>(p.mask.data)[mask_base + j];
    scores[size_t(j - lo)] = s;
    max_score = std::max(max_score, s);
  }
  if (max_score == -INFINITY) return;  // every key masked out: a zero row
  float sum = 0.0f;
  for (float& s : scores) {
    s = std::exp(s - max_score);
    sum += s;
  }
  for (float& s : scores) s /= sum;

  for (int64_t j = lo; j <= hi; ++j) {
    const int64_t block = kv.block_of(p.kv_seq(seq, j), j);
    const int slot = int(j % kv.block_size);
    const void* v = kv.row(block, 1, kv_head, slot);
    const KvRowScales vs = kv.row_scales(block, 1, kv_head, slot);
    const float a = scores[size_t(j - lo)];
    for (int d = 0; d < p.head_dim_v; ++d) out[d] += a * kv_dequantize(kv.dtype, v, d, vs);
  }
}

}  // namespace

void attention(const AttentionParams& p) {
  const int64_t num_rows = p.num_tokens();
  if (p.k != nullptr) {
    const std::vector<float> k = rotated_copy(p, p.k, p.k_stride, p.num_kv_heads);
    append_kv(p.kv, k.data(), p.k_stride, p.v, p.v_stride, p.slot_mapping, num_rows);
  }
  const std::vector<float> q = rotated_copy(p, p.q, p.q_stride, p.num_q_heads);

  // One task per (sequence, query row, head); rows of a sequence are positions past_len + i.
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
      const int64_t i_seq = row - p.q_start[seq];
      const int64_t pos = p.past_len[seq] + i_seq;
      attend_row(p, q.data(), p.q_stride, seq, row, i_seq, pos, p.past_len[seq] + q_len, head, scores);
    }
  });
}

}  // namespace inflight::kernels::reference

// The GQA decomposition of seed 000, one function per graph op, on dense row-major tensors.
#include "kernels/reference/gqa_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <vector>

namespace inflight::kernels::reference {

namespace {

// A dense float tensor of rank <= 4, row-major.
struct Tensor {
  int64_t d[4] = {1, 1, 1, 1};  // [d0, d1, d2, d3]
  std::vector<float> x;         // [d0 * d1 * d2 * d3]

  Tensor() = default;
  Tensor(int64_t a, int64_t b, int64_t c, int64_t e) : d{a, b, c, e}, x(size_t(a * b * c * e), 0.0f) {}
  float& at(int64_t i, int64_t j, int64_t k, int64_t l) { return x[size_t(((i * d[1] + j) * d[2] + k) * d[3] + l)]; }
  float at(int64_t i, int64_t j, int64_t k, int64_t l) const {
    return x[size_t(((i * d[1] + j) * d[2] + k) * d[3] + l)];
  }
};

// Reshape (B, S, heads*H) rows of a (possibly packed) buffer into (B, S, heads, H), heads starting at
// column `col0` of a row of `row_width` floats.
Tensor reshape_heads(const float* src, int B, int S, int64_t row_width, int64_t col0, int heads, int H) {
  Tensor t(B, S, heads, H);
  for (int b = 0; b < B; ++b)
    for (int s = 0; s < S; ++s)
      for (int h = 0; h < heads; ++h)
        for (int e = 0; e < H; ++e) t.at(b, s, h, e) = src[(int64_t(b) * S + s) * row_width + col0 + int64_t(h) * H + e];
  return t;
}

// Rotary embedding on (B, S, heads, H) at position past_len[b] + s, from the cos/sin caches.
void rotary(const GqaParams& p, const std::vector<int64_t>& past_len, Tensor& t) {
  const int half = p.rotary_half;
  for (int64_t b = 0; b < t.d[0]; ++b)
    for (int64_t s = 0; s < t.d[1]; ++s) {
      const int64_t pos = past_len[size_t(b)] + s;
      for (int64_t h = 0; h < t.d[2]; ++h)
        for (int i = 0; i < half; ++i) {
          const float c = p.cos_cache[pos * half + i], sn = p.sin_cache[pos * half + i];
          const int64_t a = p.rotary_interleaved ? 2 * i : i;
          const int64_t e = p.rotary_interleaved ? 2 * i + 1 : i + half;
          const float x1 = t.at(b, s, h, a), x2 = t.at(b, s, h, e);
          t.at(b, s, h, a) = x1 * c - x2 * sn;
          t.at(b, s, h, e) = x2 * c + x1 * sn;
        }
    }
}

// Transpose (0, 2, 1, 3): (B, S, N, H) <-> (B, N, S, H).
Tensor transpose_0213(const Tensor& t) {
  Tensor r(t.d[0], t.d[2], t.d[1], t.d[3]);
  for (int64_t i = 0; i < t.d[0]; ++i)
    for (int64_t j = 0; j < t.d[1]; ++j)
      for (int64_t k = 0; k < t.d[2]; ++k)
        for (int64_t l = 0; l < t.d[3]; ++l) r.at(i, k, j, l) = t.at(i, j, k, l);
  return r;
}

// Transpose (0, 1, 3, 2): (B, N, L, H) -> (B, N, H, L).
Tensor transpose_0132(const Tensor& t) {
  Tensor r(t.d[0], t.d[1], t.d[3], t.d[2]);
  for (int64_t i = 0; i < t.d[0]; ++i)
    for (int64_t j = 0; j < t.d[1]; ++j)
      for (int64_t k = 0; k < t.d[2]; ++k)
        for (int64_t l = 0; l < t.d[3]; ++l) r.at(i, j, l, k) = t.at(i, j, k, l);
  return r;
}

// present = past rows [0, past_len_b) (zeros elsewhere), then ScatterND of the S new rows (B, Nkv, S, H)
// at rows scatter_pos_b + s.
Tensor scatter_present(const GqaParams& p, const float* past, const std::vector<int64_t>& scatter_pos,
                       const Tensor& fresh) {
  Tensor present(p.batch, p.kv_num_heads, p.present_len(), p.head_size);
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.kv_num_heads; ++h) {
      if (past != nullptr)
        for (int64_t r = 0; r < scatter_pos[size_t(b)]; ++r)
          for (int e = 0; e < p.head_size; ++e)
            present.at(b, h, r, e) = past[((int64_t(b) * p.kv_num_heads + h) * p.past_buffer_len + r) * p.head_size + e];
      for (int s = 0; s < p.seq_len; ++s)
        for (int e = 0; e < p.head_size; ++e) present.at(b, h, scatter_pos[size_t(b)] + s, e) = fresh.at(b, h, s, e);
    }
  return present;
}

// Expand(G): (B, Nkv, L, H) -> (B, N, L, H), query head n reading KV head n / G.
Tensor expand_heads(const Tensor& t, int group) {
  Tensor r(t.d[0], t.d[1] * group, t.d[2], t.d[3]);
  for (int64_t i = 0; i < r.d[0]; ++i)
    for (int64_t n = 0; n < r.d[1]; ++n)
      for (int64_t k = 0; k < r.d[2]; ++k)
        for (int64_t l = 0; l < r.d[3]; ++l) r.at(i, n, k, l) = t.at(i, n / group, k, l);
  return r;
}

// Batched MatMul: (B, N, M, K) x (B, N, K, L) -> (B, N, M, L), float accumulation in k order.
Tensor matmul(const Tensor& a, const Tensor& b) {
  Tensor r(a.d[0], a.d[1], a.d[2], b.d[3]);
  for (int64_t i = 0; i < a.d[0]; ++i)
    for (int64_t j = 0; j < a.d[1]; ++j)
      for (int64_t m = 0; m < a.d[2]; ++m)
        for (int64_t l = 0; l < b.d[3]; ++l) {
          float acc = 0.0f;
          for (int64_t k = 0; k < a.d[3]; ++k) acc += a.at(i, j, m, k) * b.at(i, j, k, l);
          r.at(i, j, m, l) = acc;
        }
  return r;
}

// The additive mask (B, 1, S, L): 0 where key j is visible from query s of sequence b, else the float32
// minimum (the decomposition's Where(..., finfo_min)).
Tensor build_mask(const GqaParams& p, const std::vector<int64_t>& past_len, int64_t L) {
  Tensor mask(p.batch, 1, p.seq_len, L);
  const float kMin = std::numeric_limits<float>::lowest();
  for (int b = 0; b < p.batch; ++b) {
    const int64_t tot = int64_t(p.seqlens_k[b]) + 1;
    for (int s = 0; s < p.seq_len; ++s) {
      const int64_t pos = past_len[size_t(b)] + s;
      for (int64_t j = 0; j < L; ++j) {
        const bool visible = j <= pos && j < tot && (p.local_window_size <= 0 || j > pos - p.local_window_size);
        mask.at(b, 0, s, j) = visible ? 0.0f : kMin;
      }
    }
  }
  return mask;
}

// scores = softcap(scale * qk) + mask (+ attention_bias), then Softmax over the last axis.
void scale_mask_softmax(const GqaParams& p, const Tensor& mask, Tensor& scores) {
  const float scale = p.scale != 0.0f ? p.scale : 1.0f / std::sqrt(float(p.head_size));
  const int64_t L = scores.d[3];
  for (int64_t b = 0; b < scores.d[0]; ++b)
    for (int64_t n = 0; n < scores.d[1]; ++n)
      for (int64_t s = 0; s < scores.d[2]; ++s) {
        float* row = &scores.at(b, n, s, 0);
        for (int64_t j = 0; j < L; ++j) {
          float x = row[j] * scale;
          if (p.softcap > 0.0f) x = p.softcap * std::tanh(x / p.softcap);
          x += mask.at(b, 0, s, j);
          if (p.attention_bias != nullptr && j < p.total_sequence_length) {
            const int64_t bb = p.bias_per_batch ? b : 0, nn = p.bias_per_head ? n : 0;
            x += p.attention_bias[((bb * (p.bias_per_head ? p.num_heads : 1) + nn) * p.seq_len + s) *
                                      p.total_sequence_length + j];
          }
          row[j] = x;
        }
        const float mx = *std::max_element(row, row + L);
        float sum = 0.0f;
        for (int64_t j = 0; j < L; ++j) sum += (row[j] = std::exp(row[j] - mx));
        for (int64_t j = 0; j < L; ++j) row[j] /= sum;
      }
}

}  // namespace

void gqa_attention(const GqaParams& p) {
  const int B = p.batch, S = p.seq_len, N = p.num_heads, Nkv = p.kv_num_heads, H = p.head_size;
  if (N % Nkv != 0 || (p.do_rotary && (p.rotary_half <= 0 || 2 * p.rotary_half > H))) {
    std::fprintf(stderr, "%s:%d: gqa_attention: bad heads or rotary dims\n", __FILE__, __LINE__);
    std::abort();
  }
  // Mode: a first prompt (S == T) starts every sequence at 0 and ignores the past; otherwise the S new
  // tokens follow tot_b - S cached ones (ScatterND's scatter_pos).
  const bool first_prompt = S == p.total_sequence_length;
  std::vector<int64_t> past_len(size_t(B), 0);
  if (!first_prompt)
    for (int b = 0; b < B; ++b) past_len[size_t(b)] = int64_t(p.seqlens_k[b]) + 1 - S;

  const bool packed = p.key == nullptr;
  const int64_t q_width = packed ? int64_t(N + 2 * Nkv) * H : int64_t(N) * H;
  const int64_t kv_width = packed ? q_width : int64_t(Nkv) * H;
  Tensor q = reshape_heads(p.query, B, S, q_width, 0, N, H);  // (B, S, N, H)
  Tensor k = reshape_heads(packed ? p.query : p.key, B, S, kv_width, packed ? int64_t(N) * H : 0, Nkv, H);
  const Tensor v = reshape_heads(packed ? p.query : p.value, B, S, kv_width, packed ? int64_t(N + Nkv) * H : 0, Nkv, H);
  if (p.do_rotary) {
    rotary(p, past_len, q);
    rotary(p, past_len, k);
  }
  const Tensor q_bnsh = transpose_0213(q);  // (B, N, S, H)
  const Tensor present_k = scatter_present(p, first_prompt ? nullptr : p.past_key, past_len, transpose_0213(k));
  const Tensor present_v = scatter_present(p, first_prompt ? nullptr : p.past_value, past_len, transpose_0213(v));

  const int group = N / Nkv;
  Tensor scores = matmul(q_bnsh, transpose_0132(expand_heads(present_k, group)));  // (B, N, S, L)
  scale_mask_softmax(p, build_mask(p, past_len, present_k.d[2]), scores);
  const Tensor ctx = transpose_0213(matmul(scores, expand_heads(present_v, group)));  // (B, S, N, H)

  std::copy(ctx.x.begin(), ctx.x.end(), p.output);  // Reshape (B, S, N*H)
  if (p.present_key != nullptr) std::copy(present_k.x.begin(), present_k.x.end(), p.present_key);
  if (p.present_value != nullptr) std::copy(present_v.x.begin(), present_v.x.end(), p.present_value);
}

}  // namespace inflight::kernels::reference

// The reference attention over a paged cache against dense attention computed in double here.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/attention_params.h"

using namespace inflight::kernels;

namespace {

struct Seq {
  int past, q_len;
};

// Scatters dense K/V ([total, Nkv, H] per sequence) into shuffled blocks, runs reference::attention,
// and compares with a dense double-precision computation.
void check_case(int block_size, int num_q_heads, int num_kv_heads, int head_dim, KvDType dtype, int pre_tokens,
                float softcap) {
  const std::vector<Seq> seqs{{5, 7}, {20, 1}, {0, 3}};
  std::mt19937 rng(block_size * 131 + num_q_heads * 7 + head_dim);
  std::normal_distribution<float> normal;
  const int kv_dim = num_kv_heads * head_dim, q_dim = num_q_heads * head_dim;

  int max_blocks = 0, total_blocks = 0;
  for (const Seq& s : seqs) {
    const int nb = (s.past + s.q_len + block_size - 1) / block_size;
    max_blocks = std::max(max_blocks, nb);
    total_blocks += nb;
  }
  std::vector<int32_t> perm(static_cast<size_t>(total_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);

  std::vector<float> storage(size_t(total_blocks) * 2 * kv_dim * block_size);
  PagedKvView kv{storage.data(), dtype, total_blocks, block_size, num_kv_heads, head_dim, nullptr, max_blocks};
  std::vector<int32_t> tables(seqs.size() * size_t(max_blocks), -1);
  std::vector<int32_t> q_start{0}, past;
  std::vector<std::vector<float>> dense_k, dense_v;  // per sequence [total, kv_dim]
  std::vector<float> q;
  int next_block = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int total = seqs[s].past + seqs[s].q_len;
    const int nb = (total + block_size - 1) / block_size;
    for (int b = 0; b < nb; ++b) tables[s * max_blocks + b] = perm[size_t(next_block++)];
    dense_k.emplace_back(size_t(total) * kv_dim);
    dense_v.emplace_back(size_t(total) * kv_dim);
    for (float& x : dense_k.back()) x = normal(rng);
    for (float& x : dense_v.back()) x = normal(rng);
    std::vector<int64_t> slots(static_cast<size_t>(total));
    for (int pos = 0; pos < total; ++pos)
      slots[size_t(pos)] = int64_t(tables[s * max_blocks + pos / block_size]) * block_size + pos % block_size;
    append_kv(kv, dense_k.back().data(), kv_dim, dense_v.back().data(), kv_dim, slots.data(), total);
    // Stored values are what attention reads; round the dense copy the same way.
    for (float& x : dense_k.back()) x = dtype == KvDType::F16 ? f16_to_f32(f32_to_f16(x)) : x;
    for (float& x : dense_v.back()) x = dtype == KvDType::F16 ? f16_to_f32(f32_to_f16(x)) : x;
    for (int i = 0; i < seqs[s].q_len * q_dim; ++i) q.push_back(normal(rng));
    q_start.push_back(q_start.back() + seqs[s].q_len);
    past.push_back(seqs[s].past);
  }
  kv.block_tables = tables.data();

  std::vector<float> out(size_t(q_start.back()) * q_dim, NAN);
  AttentionParams p;
  p.q = q.data();
  p.q_stride = q_dim;
  p.out = out.data();
  p.num_q_heads = num_q_heads;
  p.num_kv_heads = num_kv_heads;
  p.head_dim = p.head_dim_v = head_dim;
  p.scale = 1.0f / std::sqrt(float(head_dim));
  p.softcap = softcap;
  p.pre_tokens = pre_tokens;
  p.num_seqs = int(seqs.size());
  p.q_start = q_start.data();
  p.past_len = past.data();
  p.kv = kv;
  reference::attention(p);

  const int group = num_q_heads / num_kv_heads;
  double max_err = 0.0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    for (int i = 0; i < seqs[s].q_len; ++i) {
      const int row = q_start[s] + i, pos = seqs[s].past + i;
      const int lo = pre_tokens < 0 ? 0 : std::max(0, pos - pre_tokens);
      for (int h = 0; h < num_q_heads; ++h) {
        const int kh = h / group;
        std::vector<double> w;
        for (int j = lo; j <= pos; ++j) {
          double dot = 0.0;
          for (int d = 0; d < head_dim; ++d)
            dot += double(q[size_t(row) * q_dim + h * head_dim + d]) * dense_k[s][size_t(j) * kv_dim + kh * head_dim + d];
          dot /= std::sqrt(double(head_dim));
          if (softcap > 0) dot = softcap * std::tanh(dot / softcap);
          w.push_back(dot);
        }
        const double m = *std::max_element(w.begin(), w.end());
        double sum = 0.0;
        for (double& x : w) sum += (x = std::exp(x - m));
        for (int d = 0; d < head_dim; ++d) {
          double o = 0.0;
          for (int j = lo; j <= pos; ++j) o += w[size_t(j - lo)] / sum * dense_v[s][size_t(j) * kv_dim + kh * head_dim + d];
          max_err = std::max(max_err, std::fabs(o - out[size_t(row) * q_dim + h * head_dim + d]));
        }
      }
    }
  }
  CAPTURE(block_size);
  CAPTURE(num_q_heads);
  CAPTURE(num_kv_heads);
  CAPTURE(pre_tokens);
  CHECK(max_err < 1e-5);
}

}  // namespace

TEST_SUITE("reference_attention") {
  TEST_CASE("paged, GQA, causal, packed context and decode rows match dense attention") {
    for (int block_size : {1, 4, 16})
      for (auto [nq, nkv] : {std::pair{4, 4}, {8, 2}, {8, 1}})
        for (KvDType dtype : {KvDType::F32, KvDType::F16}) check_case(block_size, nq, nkv, 16, dtype, -1, 0.0f);
  }
  TEST_CASE("sliding window and softcap") {
    check_case(4, 8, 2, 8, KvDType::F32, 3, 0.0f);
    check_case(16, 8, 4, 8, KvDType::F32, -1, 1.5f);
  }
}

// NSA selected attention on the CPU: one task per (query token, KV head). The selected blocks are
// gathered as row addresses (no copy), masked keys dropped from the list, and the G query heads of the
// KV head attend to them through the tile routine, folding tile states in gather order.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/attention_driver.h"
#include "kernels/nsa_params.h"
#include "kernels/thread_pool.h"

namespace inflight::kernels::cpu {

namespace {

void attend_token_head(const NsaParams& p, int b, int64_t t, int h) {
  const int G = p.num_q_heads / p.num_kv_heads;
  const int bs = p.selected_block_size, count = p.selected_block_count;
  const int pdim = padded_dim(p.head_dim_qk), pdim_v = padded_dim(p.head_dim_v);
  const int eb = kv_elem_bytes(p.dtype);
  const int64_t i = t - p.cu_seqlens_q[b];
  const int64_t kv0 = p.cu_seqlens_kv[b], kv_len = p.cu_seqlens_kv[b + 1] - kv0;
  const auto* kbase = static_cast<const uint8_t*>(p.k);
  const auto* vbase = static_cast<const uint8_t*>(p.v);

  const int64_t scratch_floats = tile_scratch_floats(G, p.head_dim_qk, p.head_dim_v);
  float* buf = thread_workspace().get(int64_t(G) * (pdim + 2 * pdim_v + 2) + scratch_floats + 32);
  float* q = buf;                                // [G, pdim]
  float* row_o = q + int64_t(G) * pdim;          // [G, pdim_v]
  float* tile_o = row_o + int64_t(G) * pdim_v;   // [G, pdim_v]
  float* tile_m = tile_o + int64_t(G) * pdim_v;  // [G]
  float* tile_d = tile_m + G;                    // [G]
  float* scratch = tile_d + G;
  scratch += (16 - (scratch - buf) % 16) % 16;

  for (int g = 0; g < G; ++g) {
    float* d = q + int64_t(g) * pdim;
    const auto* src = static_cast<const uint8_t*>(p.q) + (t * p.num_q_heads + h * G + g) * p.head_dim_qk * eb;
    kv_dequantize_row(p.dtype, src, p.head_dim_qk, d, KvRowScales{});
    std::fill(d + p.head_dim_qk, d + pdim, 0.0f);
  }
  SoftmaxState row[32];
  reset_states(row, G, row_o, pdim_v);

  const void* k_rows[kKvTile];
  const void* v_rows[kKvTile];
  int lo[32], hi[32];
  TileArgs a;
  a.num_queries = G;
  a.q = q;
  a.head_dim = p.head_dim_qk;
  a.head_dim_v = p.head_dim_v;
  a.scale = p.scale;
  a.dtype = p.dtype;
  a.k_rows = k_rows;
  a.v_rows = v_rows;
  a.lo = lo;
  a.hi = hi;
  a.o = tile_o;
  a.m = tile_m;
  a.d = tile_d;
  a.scratch = scratch;
  a.merge_into = row;  // each tile folds into the token's states
  const AttendTileFn attend = attend_tile_fn();
  const int64_t k_row_bytes = int64_t(p.num_kv_heads) * p.head_dim_qk * eb;
  const int64_t v_row_bytes = int64_t(p.num_kv_heads) * p.head_dim_v * eb;

  int n = 0;
  auto flush = [&] {
    if (n == 0) return;
    a.num_keys = n;
    for (int g = 0; g < G; ++g) {
      lo[g] = 0;
      hi[g] = n;
    }
    attend(a);
    n = 0;
  };
  for (int c = 0; c < count; ++c) {
    const int64_t blk = p.topk_indices[(t * p.num_kv_heads + h) * count + c];
    if (blk < 0 || blk * bs >= kv_len) continue;
    int64_t end = std::min<int64_t>((blk + 1) * bs, kv_len);
    if (p.sparse_mode == 2) end = std::min(end, i + 1);
    for (int64_t j = blk * bs; j < end; ++j) {
      k_rows[n] = kbase + (kv0 + j) * k_row_bytes + int64_t(h) * p.head_dim_qk * eb;
      v_rows[n] = vbase + (kv0 + j) * v_row_bytes + int64_t(h) * p.head_dim_v * eb;
      if (++n == kKvTile) flush();
    }
  }
  flush();

  for (int g = 0; g < G; ++g) {
    const int64_t qh = t * p.num_q_heads + h * G + g;
    write_state(row[g], tile_o, p.head_dim_v);  // the tile buffer is free now
    kv_quantize_row(p.dtype, tile_o, p.head_dim_v, static_cast<uint8_t*>(p.out) + qh * p.head_dim_v * eb, KvRowScales{});
    p.softmax_max[qh] = row[g].m;
    p.softmax_sum[qh] = row[g].d;
  }
}

}  // namespace

void nsa_selected_attention(const NsaParams& p) {
  check_nsa_params(p, __FILE__, __LINE__);
  std::vector<int> seq_of;  // [T_q] sequence of each query token
  for (int b = 0; b < p.batch; ++b)
    for (int t = p.cu_seqlens_q[b]; t < p.cu_seqlens_q[b + 1]; ++t) seq_of.push_back(b);
  const int64_t num_items = int64_t(seq_of.size()) * p.num_kv_heads;
  compute_pool().run(num_items, [&](int64_t item) {
    const int64_t t = item / p.num_kv_heads;
    attend_token_head(p, seq_of[size_t(t)], t, int(item % p.num_kv_heads));
  });
}

}  // namespace inflight::kernels::cpu

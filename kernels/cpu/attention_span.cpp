// The span fold every CPU attention driver uses, the online-softmax state, RoPE tables and scratch.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/cpu/attention_driver.h"
#include "kernels/cpu/isa.h"
#include "kernels/thread_pool.h"

namespace inflight::kernels::cpu {

// ---- online-softmax state ----

void reset_state(SoftmaxState& s, int dim) {
  std::fill(s.o, s.o + dim, 0.0f);
  s.m = -INFINITY;
  s.d = 0.0f;
}

void reset_states(SoftmaxState* s, int n, float* o, int dim) {
  std::fill(o, o + int64_t(n) * dim, 0.0f);
  for (int i = 0; i < n; ++i) s[i] = SoftmaxState{o + int64_t(i) * dim, -INFINITY, 0.0f};
}

void merge_state(SoftmaxState& a, const SoftmaxState& b, int dim) {
  const Isa isa = active_isa();
  if (isa >= Isa::Avx512) merge_state_avx512(a, b, dim);
  else if (isa >= Isa::Avx2) merge_state_avx2(a, b, dim);
  else merge_state_scalar(a, b, dim);
}

void write_state(const SoftmaxState& s, float* out, int dim) {
  if (!(s.m > -INFINITY) || !(s.d > 0.0f)) {
    std::fill(out, out + dim, 0.0f);
    return;
  }
  const float inv = 1.0f / s.d;
  for (int i = 0; i < dim; ++i) out[i] = s.o[i] * inv;
}

AttendTileFn attend_tile_fn() {
  const Isa isa = active_isa();
  if (isa >= Isa::Avx512Bf16) return attend_tile_avx512_bf16;
  if (isa >= Isa::Avx512Vnni) return attend_tile_avx512_vnni;
  if (isa >= Isa::Avx512) return attend_tile_avx512;
  if (isa >= Isa::Avx2) return attend_tile_avx2;
  return attend_tile_scalar;
}

// ---- RoPE ----

void RopeTable::build(const AttentionParams& p, int64_t row_begin, int64_t row_end) {
  num_pairs_ = 0;
  if (!p.rope_on()) return;
  rope_ = p.rope;
  if (rope_.rotary_dim % 2 != 0 || rope_.rotary_dim > p.head_dim) {
    std::fprintf(stderr, "%s:%d: rope: bad rotary_dim %d for head_dim %d\n", __FILE__, __LINE__, rope_.rotary_dim,
                 p.head_dim);
    std::abort();
  }
  rope_.head_dim = p.head_dim;
  num_pairs_ = rope_.rotary_dim / 2;
  row_begin_ = row_begin;
  std::vector<float> freq(static_cast<size_t>(num_pairs_));  // [num_pairs] radians per position
  rope_frequencies(rope_, freq.data());
  const int64_t num_rows = row_end - row_begin;
  cos_sin_.resize(size_t(std::max<int64_t>(0, num_rows)) * 2 * num_pairs_);
  const int pairs = num_pairs_;
  compute_pool().parallel_for(num_rows, 64, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      rope_cos_sin(rope_, freq.data(), float(p.positions[row_begin + r]), &cos_sin_[size_t(r) * 2 * pairs]);
  });
}

namespace {

// rotate_head four floats at a time (the baseline's SSE width, through the compiler's vector extensions): each
// element is one product and one sum of two products as there, a c - b s taken as a c + (-(b s)) and a s + b c
// as b c + a s, so the same bits. GptJ pairs are adjacent (two pairs a vector); NeoX pairs are rotary_dim / 2
// apart (four pairs a vector).
using Float4 = float __attribute__((vector_size(16)));
inline Float4 load4(const float* p) {
  Float4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store4(float* p, Float4 v) { std::memcpy(p, &v, sizeof v); }

void rotate_adjacent_pairs(const float* cos_sin, int num_pairs, float* head) {
  const Float4 sign = {-1.0f, 1.0f, -1.0f, 1.0f};
  for (int i = 0; i < 2 * num_pairs; i += 4) {
    const Float4 x = load4(head + i), t = load4(cos_sin + i);
    const Float4 c = __builtin_shufflevector(t, t, 0, 0, 2, 2), s = __builtin_shufflevector(t, t, 1, 1, 3, 3);
    store4(head + i, x * c + __builtin_shufflevector(x, x, 1, 0, 3, 2) * s * sign);
  }
}

void rotate_half_pairs(const float* cos_sin, int num_pairs, float* head) {
  for (int i = 0; i < num_pairs; i += 4) {
    const Float4 t0 = load4(cos_sin + 2 * i), t1 = load4(cos_sin + 2 * i + 4);
    const Float4 c = __builtin_shufflevector(t0, t1, 0, 2, 4, 6), s = __builtin_shufflevector(t0, t1, 1, 3, 5, 7);
    const Float4 a = load4(head + i), b = load4(head + num_pairs + i);
    store4(head + i, a * c + -(b * s));
    store4(head + num_pairs + i, b * c + a * s);
  }
}

}  // namespace

void RopeTable::rotate(int64_t row, float* head) const {
  if (num_pairs_ == 0) return;
  const float* cos_sin = &cos_sin_[size_t(row - row_begin_) * 2 * num_pairs_];
  if (rope_.style == RopeStyle::GptJ && num_pairs_ % 2 == 0) rotate_adjacent_pairs(cos_sin, num_pairs_, head);
  else if (rope_.style == RopeStyle::NeoX && num_pairs_ % 4 == 0) rotate_half_pairs(cos_sin, num_pairs_, head);
  else rotate_head(rope_, cos_sin, head);
}

// ---- scratch ----

float* Workspace::get(int64_t num_floats) {
  const size_t need = size_t(num_floats) + 16;
  if (buf_.size() < need) buf_.resize(need);
  const uintptr_t addr = reinterpret_cast<uintptr_t>(buf_.data());
  return buf_.data() + ((64 - addr % 64) % 64) / sizeof(float);
}

Workspace& thread_workspace() {
  thread_local Workspace ws;
  return ws;
}

// ---- queries ----

void visible_keys(const AttentionParams& p, int64_t pos, int64_t total, int64_t* lo, int64_t* hi) {
  *lo = p.pre_tokens < 0 ? 0 : std::max<int64_t>(0, pos - p.pre_tokens);
  *hi = p.next_tokens < 0 ? total : std::min<int64_t>(total, pos + p.next_tokens + 1);
}

const void* mask_key0(const AttentionParams& p, int s, int h, int64_t i) {
  if (p.mask.kind == MaskKind::None || p.mask.data == nullptr) return nullptr;
  const int64_t e = int64_t(s) * p.mask.seq_stride + int64_t(h) * p.mask.head_stride + i * p.mask.row_stride;
  if (p.mask.kind == MaskKind::Bool) return static_cast<const uint8_t*>(p.mask.data) + e;
  return static_cast<const float*>(p.mask.data) + e;
}

void gather_query_heads(const AttentionParams& p, const RopeTable& rope, int64_t row, int h0, int num_heads,
                        float* dst) {
  const int pdim = padded_dim(p.head_dim);
  for (int g = 0; g < num_heads; ++g) {
    float* d = dst + int64_t(g) * pdim;
    std::memcpy(d, p.q + row * p.q_stride + int64_t(h0 + g) * p.head_dim, size_t(p.head_dim) * sizeof(float));
    std::fill(d + p.head_dim, d + pdim, 0.0f);
    rope.rotate(row, d);
  }
}

void span_range(const QuerySet& qs, int64_t* first, int64_t* last) {
  int64_t lo = INT64_MAX, hi = 0;
  for (int r = 0; r < qs.num; ++r) {
    if (qs.lo[r] >= qs.hi[r]) continue;
    lo = std::min(lo, qs.lo[r]);
    hi = std::max(hi, qs.hi[r]);
  }
  if (lo >= hi) {
    *first = *last = 0;
    return;
  }
  *first = lo / kKvSpan;
  *last = (hi + kKvSpan - 1) / kKvSpan;
}

// ---- the span fold ----

namespace {

// Row addresses of one tile of a paged (sequence, KV head).
struct TileRows {
  int num = 0;
  const void* k[kKvTile];
  const void* v[kKvTile];
  const float* k_scales[kKvTile];  // Int8 group scales per row
  const float* v_scales[kKvTile];
};

// Keys [t0, t0 + n) of sequence `seq` as seen through the cache indirection; one block lookup per run of
// keys in the same block (per key with beams).
void fill_tile_rows(const AttentionParams& p, int seq, int kv_head, int64_t t0, int n, TileRows* out) {
  const PagedKvView& kv = p.kv;
  const int64_t row_bytes = int64_t(kv.head_dim) * kv_elem_bytes(kv.dtype);
  const bool grouped = kv_has_group_scales(kv.dtype);
  out->num = n;
  for (int j = 0; j < n;) {
    const int64_t pos = t0 + j;
    const int slot = int(pos & (kv.block_size - 1));
    const int run = p.cache_indir != nullptr ? 1 : std::min(n - j, kv.block_size - slot);
    const int64_t block = kv.block_of(p.kv_seq(seq, pos), pos);
    const auto* k0 = static_cast<const uint8_t*>(kv.row(block, 0, kv_head, slot));
    const auto* v0 = static_cast<const uint8_t*>(kv.row(block, 1, kv_head, slot));
    for (int i = 0; i < run; ++i) {
      out->k[j + i] = k0 + i * row_bytes;
      out->v[j + i] = v0 + i * row_bytes;
    }
    if (grouped) {
      const float* ks = kv.row_scales(block, 0, kv_head, slot).group;
      const float* vs = kv.row_scales(block, 1, kv_head, slot).group;
      for (int i = 0; i < run; ++i) {
        out->k_scales[j + i] = ks + int64_t(i) * kv.num_scale_groups();
        out->v_scales[j + i] = vs + int64_t(i) * kv.num_scale_groups();
      }
    }
    j += run;
  }
}

// prefetcht1 of the line at p (inline asm: GCC 12 may delete __builtin_prefetch, attention_tile_impl.h).
inline void prefetch_line(const void* p) { asm volatile("prefetcht1 %0" : : "m"(*static_cast<const char*>(p))); }

// What the tiles of one step prefetch for the next tile: memory regions of equal size.
struct PrefetchPlan {
  int num = 0;
  int64_t bytes = 0;                     // per region
  const char* regions[2 * kKvTile];      // block data (whole blocks) or K / V rows
  int num_scales = 0;                    // whole blocks: their Int8 scales, scale_bytes each
  int64_t scale_bytes = 0;
  const char* scales[kKvTile];
};

// Prefetches share [i, i + 1) of `parts` of the plan's block scales: the heads of a tile step take turns,
// a few lines each (measured: with all of them at once at the step's start, the next step's scale loads
// stalled; their routine's share of an int8 decode profile halved, 6 % -> 3 %, with the turns).
void prefetch_scales(const PrefetchPlan& plan, int i, int parts) {
  const int64_t begin = (plan.scale_bytes * i / parts) & ~int64_t(63), end = plan.scale_bytes * (i + 1) / parts;
  for (int b = 0; b < plan.num_scales; ++b)
    for (int64_t x = begin; x < end; x += 64) prefetch_line(plan.scales[b] + x);
}

// The next tile [t0, t0 + n) of sequence `seq` as whole blocks (every head, K and V) in block order, and
// their Int8 scales. False when a block is larger than a tile or beams scatter the keys.
bool plan_blocks(const AttentionParams& p, int seq, int64_t t0, int n, PrefetchPlan* plan) {
  const PagedKvView& kv = p.kv;
  if (p.cache_indir != nullptr || kv.block_size > kKvTile) return false;
  const int64_t rows_per_block = 2 * int64_t(kv.num_kv_heads) * kv.block_size;
  plan->num = 0;
  plan->num_scales = 0;
  plan->bytes = rows_per_block * kv.head_dim * kv_elem_bytes(kv.dtype);
  plan->scale_bytes = rows_per_block * kv.num_scale_groups() * int64_t(sizeof(float));
  for (int64_t pos = t0; pos < t0 + n; pos += kv.block_size) {
    const int64_t block = kv.block_of(seq, pos);
    plan->regions[plan->num++] = static_cast<const char*>(kv.row(block, 0, 0, 0));
    if (kv.scales != nullptr)
      plan->scales[plan->num_scales++] = reinterpret_cast<const char*>(kv.row_scales(block, 0, 0, 0).group);
  }
  return true;
}

// Prefetches the lines holding the Int8 group scales of `rows` (fill_tile_rows of a grouped dtype): the
// first row's, then each row's whose scales start a line.
void prefetch_scale_lines(const TileRows& rows) {
  for (int j = 0; j < rows.num; ++j)
    if (j == 0 || (reinterpret_cast<uintptr_t>(rows.k_scales[j]) & 63) == 0) {
      prefetch_line(rows.k_scales[j]);
      prefetch_line(rows.v_scales[j]);
    }
}

// One head's next tile as its K and V rows, their Int8 scales prefetched right away.
void plan_rows(const AttentionParams& p, const TileRows& rows, PrefetchPlan* plan) {
  plan->num = 0;
  plan->bytes = int64_t(p.kv.head_dim) * kv_elem_bytes(p.kv.dtype);
  for (int j = 0; j < rows.num; ++j) {
    plan->regions[plan->num++] = static_cast<const char*>(rows.k[j]);
    plan->regions[plan->num++] = static_cast<const char*>(rows.v[j]);
  }
  if (kv_has_group_scales(p.kv.dtype)) prefetch_scale_lines(rows);
}

}  // namespace

void prefetch_tile(const AttentionParams& p, int seq, int head_begin, int head_end, int64_t t0, int64_t total) {
  const int n = int(std::min<int64_t>(kKvTile, total - t0));
  if (n <= 0) return;
  const int64_t row_bytes = int64_t(p.kv.head_dim) * kv_elem_bytes(p.kv.dtype);
  const bool grouped = kv_has_group_scales(p.kv.dtype);
  TileRows rows;
  for (int h = head_begin; h < head_end; ++h) {
    fill_tile_rows(p, seq, h, t0, n, &rows);
    for (int j = 0; j < n; ++j)
      for (int64_t b = 0; b < row_bytes; b += 64) prefetch_line(static_cast<const char*>(rows.k[j]) + b);
    for (int j = 0; j < n; ++j)
      for (int64_t b = 0; b < row_bytes; b += 64) prefetch_line(static_cast<const char*>(rows.v[j]) + b);
    if (grouped) prefetch_scale_lines(rows);
  }
}

int64_t span_scratch_floats(const AttentionParams& p, int num_queries) {
  return int64_t(num_queries) * (padded_dim(p.head_dim_v) + 2) + 32 +
         tile_scratch_floats(num_queries, p.head_dim, p.head_dim_v);
}

void attend_span(const AttentionParams& p, int seq, int64_t total, const HeadWork* heads, int num_heads,
                 int64_t span_begin, int64_t prefetch_limit, float* scratch) {
  int max_r = 0;
  for (int i = 0; i < num_heads; ++i) max_r = std::max(max_r, heads[i].qs->num);
  const int pdim_v = padded_dim(p.head_dim_v);
  float* tile_o = scratch;                            // [R, pdim_v]
  float* tile_m = tile_o + int64_t(max_r) * pdim_v;   // [R]
  float* tile_d = tile_m + max_r;                     // [R]
  float* tile_scratch = tile_d + max_r;
  tile_scratch += (16 - (tile_scratch - scratch) % 16) % 16;  // 64-byte aligned like scratch

  TileRows rows, next_rows;
  PrefetchPlan plan;  // the next tile's memory
  // From one KV head's rows (block, kv, head, slot) to the next head's: [.., num_kv_heads, block_size, dim].
  const int64_t head_bytes = int64_t(p.kv.block_size) * p.kv.head_dim * kv_elem_bytes(p.kv.dtype);
  const int64_t head_scales = int64_t(p.kv.block_size) * p.kv.num_scale_groups();
  int lo[kMaxTileQueries], hi[kMaxTileQueries];
  const void* mask_rows[kMaxTileQueries];
  const int64_t mask_elem = p.mask.kind == MaskKind::Bool ? 1 : 4;
  const AttendTileFn attend = attend_tile_fn();
  const bool all_heads = num_heads == p.num_kv_heads;
  // Queries the tile routine takes as int16: rounded once here for the span's tiles.
  thread_local std::vector<int16_t> q16;     // [num_heads, max_r, 2 head_dim]
  thread_local std::vector<float> q16_scale; // [num_heads, max_r]
  const bool use_q16 = tile_uses_q16(active_isa() >= Isa::Avx512Vnni, p.kv.dtype, p.kv.quant_group, p.head_dim,
                                     p.head_dim_v);
  if (use_q16) {
    q16.resize(size_t(num_heads) * max_r * 2 * p.head_dim);
    q16_scale.resize(size_t(num_heads) * max_r);
    for (int i = 0; i < num_heads; ++i)
      quantize_queries_int16(heads[i].qs->q, heads[i].qs->num, p.head_dim, &q16[size_t(i) * max_r * 2 * p.head_dim],
                             &q16_scale[size_t(i) * max_r]);
  }

  TileArgs a;
  a.head_dim = p.head_dim;
  a.head_dim_v = p.head_dim_v;
  a.scale = p.effective_scale();
  a.softcap = p.softcap;
  a.dtype = p.kv.dtype;
  a.quant_group = p.kv.quant_group;
  a.quant_orig_k = p.kv.quant_orig_scale[0];
  a.quant_orig_v = p.kv.quant_orig_scale[1];
  a.lo = lo;
  a.hi = hi;
  a.mask_kind = p.mask.kind;
  a.mask_rows = mask_rows;
  a.o = tile_o;
  a.m = tile_m;
  a.d = tile_d;
  a.scratch = tile_scratch;

  const int64_t span_end = std::min<int64_t>(span_begin + kKvSpan, total);
  for (int64_t t0 = span_begin; t0 < span_end; t0 += kKvTile) {
    const int n = int(std::min<int64_t>(kKvTile, total - t0));
    // NOTE: a head's 16-token block row is one 4 KiB page for f16 / 128 features, and the next block is
    // 64 KiB away: hardware prefetchers stop at page ends (measured: half the bandwidth without this),
    // so the next tile is prefetched by hand, even across the span's end.
    const int64_t t1 = t0 + kKvTile;  // (measured: 2 or 3 tiles ahead is slower)
    const int n1 = int(std::clamp<int64_t>(std::min(total, prefetch_limit) - t1, 0, kKvTile));
    plan.num = 0;
    const bool by_block = all_heads && n1 > 0 && plan_blocks(p, seq, t1, n1, &plan);
    int rows_head = -1;  // the KV head `rows` holds
    for (int i = 0; i < num_heads; ++i) {
      const QuerySet& qs = *heads[i].qs;
      const int R = qs.num;
      bool any = false;
      for (int r = 0; r < R; ++r) {
        lo[r] = int(std::clamp<int64_t>(qs.lo[r] - t0, 0, n));
        hi[r] = int(std::clamp<int64_t>(qs.hi[r] - t0, 0, n));
        any |= lo[r] < hi[r];
        mask_rows[r] = qs.mask_key0[r] == nullptr
                           ? nullptr
                           : static_cast<const uint8_t*>(qs.mask_key0[r]) + t0 * mask_elem;
      }
      if (!any) continue;
      if (!by_block && n1 > 0) {
        fill_tile_rows(p, seq, heads[i].kv_head, t1, n1, &next_rows);
        plan_rows(p, next_rows, &plan);
      }
      // The tile's rows are looked up once, for the first head; head h's rows sit (h - h0) head strides on.
      if (rows_head < 0) {
        fill_tile_rows(p, seq, heads[i].kv_head, t0, n, &rows);
        rows_head = heads[i].kv_head;
      }
      a.row_offset = (heads[i].kv_head - rows_head) * head_bytes;
      a.scale_offset = (heads[i].kv_head - rows_head) * head_scales;
      // Whole blocks are shared out over the heads; rows belong to this head.
      const int64_t plan_bytes = plan.num * plan.bytes;
      a.prefetch = plan.regions;
      a.num_prefetch = plan.num;
      a.prefetch_bytes = plan.bytes;
      if (by_block) prefetch_scales(plan, i, num_heads);
      a.prefetch_begin = by_block ? plan_bytes * i / num_heads : 0;
      a.prefetch_end = by_block ? plan_bytes * (i + 1) / num_heads : plan_bytes;
      a.num_queries = R;
      a.q = qs.q;
      a.q16 = use_q16 ? &q16[size_t(i) * max_r * 2 * p.head_dim] : nullptr;
      a.q16_scale = use_q16 ? &q16_scale[size_t(i) * max_r] : nullptr;
      a.num_keys = n;
      a.k_rows = rows.k;
      a.v_rows = rows.v;
      a.k_scales = rows.k_scales;
      a.v_scales = rows.v_scales;
      a.merge_into = heads[i].span;
      attend(a);
    }
  }
}

void check_params(const AttentionParams& p, const char* file, int line) {
  const char* what = nullptr;
  if (p.num_kv_heads <= 0 || p.num_q_heads % p.num_kv_heads != 0) what = "num_q_heads must be a multiple of num_kv_heads";
  else if (p.num_q_heads / p.num_kv_heads > kMaxTileQueries) what = "GQA group larger than 64";
  else if (p.head_dim != p.kv.head_dim || p.head_dim_v != p.kv.head_dim) what = "paged attention needs head_dim == head_dim_v == kv.head_dim";
  else if (p.kv.num_kv_heads != p.num_kv_heads) what = "kv.num_kv_heads != num_kv_heads";
  else if (kv_has_group_scales(p.kv.dtype) &&
           (p.kv.scales == nullptr || p.kv.quant_group < 8 || p.head_dim % p.kv.quant_group != 0))
    what = "int8 KV needs scales and a quant_group >= 8 dividing head_dim";
  if (what == nullptr) return;
  std::fprintf(stderr, "%s:%d: attention: %s\n", file, line, what);
  std::abort();
}

}  // namespace inflight::kernels::cpu

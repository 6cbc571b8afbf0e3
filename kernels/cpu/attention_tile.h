// The unit every CPU attention kernel is built from: one tile of up to kKvTile keys of one KV head
// against R queries (the G query heads of a decode row, rows x G heads of a context tile, or the G
// heads of an NSA token), giving one online-softmax state per query. The context, generation and NSA
// drivers differ only in which tiles they visit and how they spread them over threads; they all fold
// tile states the same way:
//
//   span state = fold(merge, tile states of the span's tiles, in key order)   (span: kKvSpan aligned keys)
//   row state  = fold(merge, span states, in key order)
//
// with tiles and spans aligned at absolute key positions. The split-K plan (one thread per span, then
// a merge) and the sequential plan compute exactly this, so a row's output does not depend on the batch,
// the chunking of its prefill, or the thread count.
//
// Per-ISA entry points follow matmul_kernels.h: attention_avx2.cpp / attention_avx512.cpp are compiled
// with -mavx2 / -mavx512f, keep all code in anonymous namespaces, and export only the functions below.
#pragma once
#include <cstdint>

#include "kernels/attention_params.h"

namespace inflight::kernels::cpu {

inline constexpr int kKvTile = 64;             // keys per tile (one state per query per tile)
inline constexpr int kKvSpan = 512;            // keys per span; a multiple of kKvTile
inline constexpr int kMaxTileQueries = 64;     // R per tile call
inline constexpr int kVecPad = 16;             // q / o rows are padded to a multiple of 16 floats

// NOTE: static (internal linkage): the ISA files call it, and must not emit shared inline code.
static constexpr int padded_dim(int dim) { return (dim + kVecPad - 1) / kVecPad * kVecPad; }

// FlashInfer's state_t{o, m, d}: o = sum_j exp(s_j - m) v_j (unnormalised), m = max_j s_j,
// d = sum_j exp(s_j - m). m = -inf (d = 0, o = 0) is the empty state.
struct SoftmaxState {
  float* o = nullptr;  // [dim]
  float m = 0.0f;
  float d = 0.0f;
};
void reset_state(SoftmaxState& s, int dim);
// s[0, n) <- empty states whose outputs are o's n rows of dim floats, zeroed in one pass.
void reset_states(SoftmaxState* s, int n, float* o, int dim);
// a <- a (+) b. Exact when either side is empty: merge(empty, b) copies b.
void merge_state(SoftmaxState& a, const SoftmaxState& b, int dim);
// out[0, dim) = o / d; zeros for the empty state (no visible key, as ORT writes).
void write_state(const SoftmaxState& s, float* out, int dim);

struct TileArgs {
  // Queries.
  int num_queries = 0;                    // R <= kMaxTileQueries
  const float* q = nullptr;               // [R, padded_dim(head_dim)], rotated, zero padded
  const int16_t* q16 = nullptr;           // optional: q by quantize_queries_int16, when tile_uses_q16
  const float* q16_scale = nullptr;       // [R]
  int head_dim = 0;
  int head_dim_v = 0;
  float scale = 0.0f;                     // score = softcap(scale * q.k) + additive mask
  float softcap = 0.0f;
  // Keys of the tile, rows in the cache's dtype.
  int num_keys = 0;                       // n <= kKvTile
  KvDType dtype = KvDType::F32;
  const void* const* k_rows = nullptr;    // [n] start of each key row
  const void* const* v_rows = nullptr;    // [n]
  const float* const* k_scales = nullptr; // [n] Int8 group scales of each row ([head_dim / quant_group])
  const float* const* v_scales = nullptr; // [n]
  int64_t row_offset = 0;                 // bytes added to every k_rows / v_rows entry
  int64_t scale_offset = 0;               // floats added to every k_scales / v_scales entry
  int quant_group = 0;                    // Int8
  float quant_orig_k = 1.0f;              // Int8Static / Fp8*: per-tensor dequant scale of K
  float quant_orig_v = 1.0f;              // and of V
  // Which keys each query may see: tile keys [lo[r], hi[r]) before the mask.
  const int* lo = nullptr;                // [R]
  const int* hi = nullptr;                // [R]
  MaskKind mask_kind = MaskKind::None;
  const void* const* mask_rows = nullptr; // [R] mask element of tile key 0 for query r (uint8_t / float)
  // Optional: memory a later tile will read, brought into L2 a few lines at a time, spread evenly over
  // this tile's scoring and weighting: bytes [prefetch_begin, prefetch_end) of the regions laid end to end.
  const char* const* prefetch = nullptr;  // [num_prefetch] region starts
  int num_prefetch = 0;
  int64_t prefetch_bytes = 0;             // bytes of each region
  int64_t prefetch_begin = 0;
  int64_t prefetch_end = 0;
  // Outputs: the tile state of each query.
  float* o = nullptr;                     // [R, padded_dim(head_dim_v)]
  float* m = nullptr;                     // [R]; -inf when the query sees no key of the tile
  float* d = nullptr;                     // [R]
  // Optional: merge_state(merge_into[r], tile state of r) for each query, as the last step (o, m, d are
  // then scratch). A routine may fold it into its output pass instead of writing o and reading it back.
  SoftmaxState* merge_into = nullptr;     // [R]
  float* scratch = nullptr;               // >= tile_scratch_floats(...) floats, 64-byte aligned
};

// Floats of TileArgs::scratch a tile needs (the float routine's staging and scores; what the BF16
// routine needs besides: one 32 x 64-word block per key pair and feature chunk, 32 floats per feature).
static constexpr int64_t tile_scratch_floats(int num_queries, int head_dim, int head_dim_v) {
  return int64_t(kKvTile) * (padded_dim(head_dim) + padded_dim(head_dim_v) + 2) +
         int64_t(num_queries) * kKvTile + 64 + 32 * int64_t(head_dim > head_dim_v ? head_dim : head_dim_v);
}

// Whether attend_tile_fn() takes this layout's scores from int16 queries (the VNNI routine for int8 KV with
// one scale per row or per tensor); a driver may then round its queries once (quantize_queries_int16)
// instead of once per tile.
inline bool tile_uses_q16(bool vnni, KvDType dtype, int quant_group, int head_dim, int head_dim_v) {
  return vnni && (dtype == KvDType::Int8Static || (dtype == KvDType::Int8 && quant_group == head_dim)) &&
         head_dim % 32 == 0 && head_dim <= 256 && head_dim_v % 32 == 0;
}
// Rounds q (as in TileArgs) to int16: q_scale[r] = max |q_r| / 32767 (1 for a zero query), and q16 [R,
// 2 head_dim] holds round(q / q_scale) with each 32-bit pair of features written twice, per 32 features as
// the tile routine reads them (unpacklo / unpackhi of the 16 pairs with themselves). Only where
// tile_uses_q16 (it runs AVX-512 code).
void quantize_queries_int16(const float* q, int num_queries, int head_dim, int16_t* q16, float* q_scale);

using AttendTileFn = void (*)(const TileArgs&);
void attend_tile_scalar(const TileArgs& a);
void attend_tile_avx2(const TileArgs& a);
void attend_tile_avx512(const TileArgs& a);
// Int8 with one scale per row and Int8Static through VNNI integer dot products; the rest as avx512.
void attend_tile_avx512_vnni(const TileArgs& a);
// Fp8 (head dims multiples of 32) through bf16 dot products; the rest as avx512_vnni.
void attend_tile_avx512_bf16(const TileArgs& a);
// The entry point for active_isa().
AttendTileFn attend_tile_fn();
// merge_state per ISA (merge_state dispatches on active_isa()).
void merge_state_scalar(SoftmaxState& a, const SoftmaxState& b, int dim);
void merge_state_avx2(SoftmaxState& a, const SoftmaxState& b, int dim);
void merge_state_avx512(SoftmaxState& a, const SoftmaxState& b, int dim);
// x[0, n) to f16 by F16C (round to nearest even: kv_quantize_row's F16 bits for every non-NaN value), for
// the KV append where active_isa() >= Avx2.
void f16_row_f16c(const float* x, int n, uint16_t* out);

}  // namespace inflight::kernels::cpu

// The loop nest shared by the SIMD matmul files: row blocks of kRowBlock rows, within each block
// token tiles of up to kTokenTile tokens, within each tile register tiles of R rows x T tokens.
// Every (t, r) output is produced by exactly one Kernel::tile call whose per-output summation does
// not depend on R or T, so batching never changes a result.
//
// NOTE: deliberately in an anonymous namespace: each ISA file gets its own copy compiled with its
// own -m flags and nothing with external linkage escapes (see matmul_kernels.h).
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/matmul_kernels.h"

namespace inflight::kernels::cpu {
namespace {

constexpr int kRowBlock = 8;   // rows whose weights stay in L1 while all token tiles pass over them
constexpr int kTokenTile = 4;  // tokens sharing one read of a weight row

// Kernel: template <int R, int T> static void tile(const MatmulArgs& a, int64_t r0, int64_t t0)
//   computing y[t, r] for r0 <= r < r0 + R, t0 <= t < t0 + T; and
//   template <int T> static constexpr int rows_per_tile() (its register budget).
template <class Kernel, int R, int T>
int64_t run_row_tiles(const MatmulArgs& a, int64_t r, int64_t row_end, int64_t t0) {
  for (; r + R <= row_end; r += R) Kernel::template tile<R, T>(a, r, t0);
  return r;
}

template <class Kernel, int T>
void run_token_tile(const MatmulArgs& a, int64_t r0, int64_t num_rows, int64_t t0) {
  constexpr int R = Kernel::template rows_per_tile<T>();
  const int64_t row_end = r0 + num_rows;
  int64_t r = run_row_tiles<Kernel, R, T>(a, r0, row_end, t0);
  if constexpr (R > 4) r = run_row_tiles<Kernel, 4, T>(a, r, row_end, t0);
  if constexpr (R > 2) r = run_row_tiles<Kernel, 2, T>(a, r, row_end, t0);
  if constexpr (R > 1) run_row_tiles<Kernel, 1, T>(a, r, row_end, t0);
}

// Asks for bytes [p, p + n) in L2 ahead of use. A batch reads each row block as several short row
// streams, which the hardware prefetchers pick up too late: without this, SmolLM's gate + up at 8
// tokens read its weights from DRAM at a third of the one-token rate.
inline void prefetch_bytes(const uint8_t* p, int64_t n) {
  for (int64_t i = 0; i < n; i += 64) _mm_prefetch(reinterpret_cast<const char*>(p + i), _MM_HINT_T1);
}

// At a few tokens a kernel streams the weights once, block after block. For the interleaved Q4_K kernel
// (2304-byte group-blocks, a long loop over each) the hardware prefetchers alone fall behind: TinyLlama
// Q4_K_M decode ran at about 0.8x the plain per-row kernel's speed without help, 1.19x with it (medians of
// 6 alternating rounds; 2 group-blocks ahead measured best against 3, 4 and into L2). The same helped
// neither the interleaved Q5_0 / Q8_0 VNNI kernels (SmolLM decode level to 3 % slower) nor the per-row
// K-quant one (Q6_K: level to 2 % slower), which do without it (on Intel the interleaved ones prefetch into
// L2, see kStreamAheadBytesL2 in matmul_avx512_vnni.cpp); the AVX2 interleaved Q8_0 one uses it (Zen 3).
// A streaming kernel asks, as it starts a block of `bytes` bytes at p, for the block kStreamAheadBlocks
// blocks ahead: into L1 (Zen 5: better than into L2), or, with to_l2 (MatmulArgs::stream_to_l2, Intel),
// into L2. An Intel core's L1 fill buffers hold too few misses for DRAM's latency; its L2 queue holds three
// times as many: TinyLlama Q4_K_M decode 1.06-1.15x into L2 (Intel host, 4 alternating rounds), bench_matmul
// q4_ki / q6_ki t1 about 1.2x.
constexpr int64_t kStreamAheadBlocks = 2;
inline void prefetch_stream(const uint8_t* p, int64_t bytes, bool to_l2) {
  const uint8_t* ahead = p + kStreamAheadBlocks * bytes;
  if (to_l2) {
    prefetch_bytes(ahead, bytes);
    return;
  }
  for (int64_t i = 0; i < bytes; i += 64) _mm_prefetch(reinterpret_cast<const char*>(ahead + i), _MM_HINT_T0);
}

// Row blocks ahead that a batch prefetches (1, 2 and 4 measured alike), and the most tokens for which it
// does: a long prefill computes long enough on each row block for the hardware prefetchers, and measured
// 8 % slower with the prefetches (SmolLM f16, 511 tokens).
constexpr int64_t kPrefetchBlocks = 2;
constexpr int64_t kPrefetchMaxTokens = 32;

// For a batch (2 to kPrefetchMaxTokens tokens), as the `step` rows from r0 of [row_begin, row_end) start:
// asks for the rows kPrefetchBlocks steps ahead (at the first step, every step up to there), so each row is
// asked for once, while this step computes. Row r's bytes start at a.w + r * a.w_row_bytes, which also holds
// for interleaved groups of whole rows.
inline void prefetch_ahead(const MatmulArgs& a, int64_t r0, int64_t step, int64_t row_begin, int64_t row_end) {
  if (a.num_tokens <= 1 || a.num_tokens > kPrefetchMaxTokens) return;
  const int64_t from = r0 == row_begin ? r0 + step : r0 + kPrefetchBlocks * step;
  const int64_t end = r0 + (kPrefetchBlocks + 1) * step, to = end < row_end ? end : row_end;
  if (from < to) prefetch_bytes(a.w + from * a.w_row_bytes, (to - from) * a.w_row_bytes);
}

template <class Kernel>
void run_tiled(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
  for (int64_t r0 = row_begin; r0 < row_end; r0 += kRowBlock) {
    const int64_t num_rows = row_end - r0 < kRowBlock ? row_end - r0 : kRowBlock;
    prefetch_ahead(a, r0, kRowBlock, row_begin, row_end);
    for (int64_t t0 = 0; t0 < a.num_tokens; t0 += kTokenTile) {
      switch (a.num_tokens - t0 < kTokenTile ? a.num_tokens - t0 : kTokenTile) {
        case 1: run_token_tile<Kernel, 1>(a, r0, num_rows, t0); break;
        case 2: run_token_tile<Kernel, 2>(a, r0, num_rows, t0); break;
        case 3: run_token_tile<Kernel, 3>(a, r0, num_rows, t0); break;
        default: run_token_tile<Kernel, 4>(a, r0, num_rows, t0); break;
      }
    }
  }
}

}  // namespace
}  // namespace inflight::kernels::cpu

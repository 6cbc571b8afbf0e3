// The loop nest shared by the SIMD matmul files: row blocks of kRowBlock rows, within each block
// token tiles of up to kTokenTile tokens, within each tile register tiles of R rows x T tokens.
// Every (t, r) output is produced by exactly one Kernel::tile call whose per-output summation does
// not depend on R or T, so batching never changes a result.
//
// NOTE: deliberately in an anonymous namespace: each ISA file gets its own copy compiled with its
// own -m flags and nothing with external linkage escapes (see matmul_kernels.h).
#pragma once
#include <cstdint>

#include "kernels/cpu/matmul_kernels.h"

namespace inflight::kernels::cpu {
namespace {

constexpr int kRowBlock = 8;   // rows whose weights stay in L1 while all token tiles pass over them
constexpr int kTokenTile = 4;  // tokens sharing one read of a weight row

// Kernel: template <int R, int T> static void tile(const uint8_t* w, int64_t w_row_bytes, int64_t cols,
//   const float* x, int64_t x_stride, float* y, int64_t y_stride) computing y[t * y_stride + r] for
//   r < R, t < T; and template <int T> static constexpr int rows_per_tile() (register budget).
template <class Kernel, int R, int T>
int64_t run_row_tiles(const MatmulArgs& a, const uint8_t* w, const float* x, float* y, int64_t r, int64_t num_rows) {
  for (; r + R <= num_rows; r += R)
    Kernel::template tile<R, T>(w + r * a.w_row_bytes, a.w_row_bytes, a.cols, x, a.cols, y + r, a.rows);
  return r;
}

template <class Kernel, int T>
void run_token_tile(const MatmulArgs& a, int64_t r0, int64_t num_rows, int64_t t0) {
  constexpr int R = Kernel::template rows_per_tile<T>();
  const uint8_t* w = a.w + r0 * a.w_row_bytes;
  const float* x = a.x + t0 * a.cols;
  float* y = a.y + t0 * a.rows + r0;
  int64_t r = run_row_tiles<Kernel, R, T>(a, w, x, y, 0, num_rows);
  if constexpr (R > 4) r = run_row_tiles<Kernel, 4, T>(a, w, x, y, r, num_rows);
  if constexpr (R > 2) r = run_row_tiles<Kernel, 2, T>(a, w, x, y, r, num_rows);
  if constexpr (R > 1) run_row_tiles<Kernel, 1, T>(a, w, x, y, r, num_rows);
}

template <class Kernel>
void run_tiled(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
  for (int64_t r0 = row_begin; r0 < row_end; r0 += kRowBlock) {
    const int64_t num_rows = row_end - r0 < kRowBlock ? row_end - r0 : kRowBlock;
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

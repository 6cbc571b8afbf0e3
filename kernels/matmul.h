// Weight matrix products: y = x · Wᵀ for every weight dtype, multi-threaded on the compute pool.
#pragma once
#include <cstdint>
#include <span>

#include "kernels/dtype.h"

namespace inflight::kernels {

// A row-major weight matrix [rows (out features), cols (in features)], as stored in GGUF/safetensors.
struct WeightMatrix {
  DType dtype = DType::F32;
  const void* data = nullptr;  // rows * row_bytes(dtype, cols) bytes
  int64_t rows = 0;
  int64_t cols = 0;
  // The rows rearranged by interleave_rows() into the layout the SIMD kernels read many outputs at a
  // time from: Q8_0 in groups of kInterleavedRows, Q4_0 / Q5_0 and the K-quants in groups of 16 (kernels/cpu/
  // matmul_legacy_interleave.h, matmul_kquant_interleave.h), F16 / BF16 in groups of kHalfInterleavedRows.
  // Same bytes in all; rows are read with matrix_row().
  bool interleaved = false;
};

// Q8_0: rows per interleaved group, and bytes per group and 32-column block: 16 f16 scales, then for each
// 4-column quad the 16 rows' 4 quants (offset to u8: q + 128).
inline constexpr int64_t kInterleavedRows = 16;
inline constexpr int64_t kInterleavedBlockBytes = 16 * 2 + 16 * 32;
// F16 / BF16: rows per interleaved group, stored column by column: column c of group g is the group's 32
// values (one 64-byte line) at (g * cols + c) * 64 bytes.
inline constexpr int64_t kHalfInterleavedRows = 32;

// Whether matmul() on this CPU runs `w` faster interleaved: Q4_0, Q5_0 and the K-quants with rows a
// multiple of 16 under the AVX-512 VNNI kernels, Q8_0 with rows a multiple of 16 and F16 / BF16 with rows
// a multiple of 32 under AVX2 and AVX-512 (active_isa()). An interleaved Q8_0 matmul equals the scalar
// kernel's on the plain matrix, bit for bit, under every ISA, and an interleaved Q4_0 / Q5_0 / K-quant one
// every kernel's on the plain matrix; an interleaved F16 / BF16 one sums each output in column order with
// one FMA per step, the same bits under every ISA.
bool interleaving_pays(const WeightMatrix& w);
// Writes w's rows interleaved into `out` (row_bytes(w.dtype, w.cols) * w.rows bytes; may be w.data, in
// place) and returns the matrix viewing it. Requires Q8_0 / Q4_0 / Q5_0 / a K-quant with rows a multiple of
// 16 or F16 / BF16 with rows a multiple of 32, and w not interleaved.
WeightMatrix interleave_rows(const WeightMatrix& w, void* out);
// Row r of w (plain or interleaved) in f32.
void matrix_row(const WeightMatrix& w, int64_t r, float* out);

// y[t, r] = sum_c x[t, c] * W[r, c] for t < num_tokens, accumulated in f32, on compute_pool().
// x: [num_tokens, W.cols] f32, y: [num_tokens, W.rows] f32 (must not overlap x).
// Q8_0, Q4_0 / Q4_1 / Q5_0 / Q5_1 (cols a multiple of 32) and Q4_K / Q5_K / Q6_K (cols a multiple of 256):
// as llama.cpp does, x is first quantised to int8 per block of 32 (d = amax / 127 kept as f16, as llama.cpp's
// Q8_0 / Q8_1 blocks) or of 256 (the K-quants, with sums per 16 as llama.cpp's Q8_K), and llama.cpp's integer
// block dot products are taken exactly; every ISA computes the same bits for these types. The result
// differs from f32 math by the activation rounding: at most about 0.56 * d_x * sum |W| per block.
// NOTE: each y[t, r] is summed in the same order whatever num_tokens is and however rows are split
// over threads, so a token's result does not depend on which other tokens share the batch (batch
// invariance, bit for bit). The order does depend on the ISA (kernels/cpu/isa.h).
void matmul(const WeightMatrix& w, const float* x, float* y, int64_t num_tokens);

// Several products of one input in one pass over the compute pool (Q, K and V; gate and up): y_i = x · W_iᵀ,
// x quantised once per activation format the group needs. The matrices share cols; at most 4. Each y_i is
// bit-identical to matmul(*w_i, x, y_i, num_tokens).
struct MatmulTarget {
  const WeightMatrix* w;
  float* y;  // [num_tokens, w->rows]
};
void matmul(std::span<const MatmulTarget> targets, const float* x, int64_t num_tokens);

}  // namespace inflight::kernels

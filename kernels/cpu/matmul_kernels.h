// Per-ISA entry points of matmul(). Each computes a band of output rows for all tokens; matmul.cpp
// splits the rows over the compute pool and picks the entry point for active_isa().
//
// NOTE: matmul_avx2.cpp / matmul_avx512.cpp are compiled with -mavx2 / -mavx512f. Any inline function
// or template they instantiate with external linkage (dtype.h helpers, std:: templates) could be emitted
// with those instructions and chosen by the linker for every caller, crashing AVX2-only machines. So
// those files keep all code in anonymous namespaces, use intrinsics only, and export only the
// functions below.
#pragma once
#include <cstdint>

#include "kernels/dtype.h"

namespace inflight::kernels::cpu {

struct MatmulArgs {
  DType dtype = DType::F32;
  const uint8_t* w = nullptr;  // [rows, cols] of dtype, row r at w + r * w_row_bytes
  int64_t w_row_bytes = 0;
  int64_t cols = 0;            // multiple of 32 for Q8_0
  int64_t rows = 0;            // also the row stride of y
  const float* x = nullptr;    // [num_tokens, cols]
  float* y = nullptr;          // [num_tokens, rows]
  int64_t num_tokens = 0;
  // Quantised types only: x quantised per block by quantize_activations (one row per token), blocks
  // of 32 for Q8_0 and Q4_0 .. Q5_1, of 256 for the K-quants.
  const int8_t* xq = nullptr;   // [num_tokens, cols]
  const float* xd = nullptr;    // [num_tokens, cols / activation_block_size(dtype)] block scales
  const int16_t* xs = nullptr;  // [num_tokens, cols / 16] sums of xq over each 16 (K-quants)
  // Q8_0 .. Q5_1: xd holds the scales rounded to f16, and xm [num_tokens, cols / 32] the f32 scale times
  // the block's sum of xq, rounded to f16 (llama.cpp's Q8_0 / Q8_1 blocks store d and s so).
  const float* xm = nullptr;
  // Q4_0 .. Q5_1 at a few tokens, interleaved Q4_0 / Q5_0 at any (the SIMD kernels multiply their
  // unsigned quants u, see matmul_quant_int8.h): [num_tokens, cols / 32, 8] -16 times each 4-quant group
  // sum of xq, so that u . x - 16 sum(x) (Q5_0: u - 16; Q4_0 halves it) is one dot product from this start.
  const int32_t* xo = nullptr;
  // WeightMatrix::interleaved (w points at row 0's group, w_row_bytes still one row's bytes). Q8_0 under
  // AVX-512 VNNI then needs xc: [num_tokens, cols / 32] -128 times each block's sum of xq, where the dot of
  // u8 quants q + 128 with xq starts.
  bool interleaved = false;
  const int32_t* xc = nullptr;
  bool stream_to_l2 = false;  // whether decode streams prefetch into L2, cpu::stream_prefetch_to_l2()
  bool half_tiles = false;    // AVX-512 F16 / BF16 interleaved prefill tiling, cpu::prefill_half_tiles()
  // F16 / BF16 interleaved, num_tokens > 1: x packed by token tiles of kHalfTokenTile (pack_token_tiles), so
  // a tile's x[t, c] for all its t are adjacent: tile k's n tokens (n = min(kHalfTokenTile, num_tokens -
  // k kHalfTokenTile)) as [cols, n] at xt + k kHalfTokenTile cols. (x's own rows lie cols apart, and at
  // 2048 columns 12 of them fall into the same L1 set.) Left unset elsewhere (matmul.cpp, packs_tokens): the
  // AVX-512 32 x 12 tiles and the AVX2 kernel then read x's rows; the AVX-512 half tiles always take xt.
  const float* xt = nullptr;
};

// Tokens per register tile of the interleaved F16 / BF16 kernel: 2 x 12 accumulators.
inline constexpr int64_t kHalfTokenTile = 12;

// One token tile of MatmulArgs::xt: x [n, cols] (n <= 16 rows, cols apart) -> out [cols, n]. The AVX-512
// version transposes 16 columns at a time in registers, the AVX2 one 8 x 8 blocks; all write the same floats.
void pack_token_tile_scalar(const float* x, int64_t cols, int64_t n, float* out);
void pack_token_tile_avx2(const float* x, int64_t cols, int64_t n, float* out);
void pack_token_tile_avx512(const float* x, int64_t cols, int64_t n, float* out);

// Weights per activation block of a quantised weight type: 256 for the K-quants (as llama.cpp's Q8_K),
// else 32 (Q8_0).
inline int activation_block_size(DType t) { return is_kquant(t) ? 256 : 32; }

// For Q4_0 .. Q6_K: blocks of `block` weights as llama.cpp quantises them (matmul.cpp), plus, where s != nullptr
// (either block size; the K-quants need them), s[n / 16]: sums of q over each 16. block 32: d is rounded to f16 and m[n / 32] (required) gets the f32 scale times the
// block's sum of q, rounded to f16, and o (optional) [n / 32, 8] the MatmulArgs::xo lanes; block 256: m and
// o are unused.
// c (optional, block 32) [n / 32]: -128 times each block's sum of q (MatmulArgs::xc).
// Runs the active ISA's version; every version gives the same bits.
void quantize_activations(const float* x, int64_t n, int block, int8_t* q, float* d, int16_t* s, float* m,
                          int32_t* o = nullptr, int32_t* c = nullptr);
void quantize_activations_scalar(const float* x, int64_t n, int block, int8_t* q, float* d, int16_t* s, float* m,
                                 int32_t* o = nullptr, int32_t* c = nullptr);
void quantize_activations_avx2(const float* x, int64_t n, int block, int8_t* q, float* d, int16_t* s, float* m,
                               int32_t* o = nullptr, int32_t* c = nullptr);
void quantize_activations_avx512(const float* x, int64_t n, int block, int8_t* q, float* d, int16_t* s, float* m,
                                 int32_t* o = nullptr, int32_t* c = nullptr);

// Computes y[t, r] for r in [row_begin, row_end), t < num_tokens:
//   F32 / F16 / BF16: sum_c W[r, c] * x[t, c];
//   Q8_0: sum_b (dw[r, b] * xd[t, b]) * (sum_{i < 32} qw[r, b, i] * xq[t, b, i]), the inner sum exact in
//   int32 (llama.cpp's q8_0 x q8_0 dot; the activation rounding is the only loss against f32 math).
//   Q4_0 .. Q6_K: the integer dot products of llama.cpp's vec_dot for the type, exact in int32, then
//   combined with the block scales in one float expression per block (matmul_quant_formula.h), so
//   every ISA computes the same bits for these types.
// Within one ISA the summation order of each y[t, r] depends only on cols (batch invariance).
void matmul_rows_scalar(const MatmulArgs& a, int64_t row_begin, int64_t row_end);
// Q4_0 .. Q6_K part of matmul_rows_scalar (matmul_quant_scalar.cpp).
void matmul_rows_quant_scalar(const MatmulArgs& a, int64_t row_begin, int64_t row_end);
// Also F16 / BF16 interleaved (row_begin, row_end multiples of 32) and Q8_0 interleaved (multiples of 16;
// also on AVX-512 CPUs without VNNI), with the same results as matmul_rows_scalar.
void matmul_rows_avx2(const MatmulArgs& a, int64_t row_begin, int64_t row_end);
// Also F16 / BF16 interleaved (row_begin, row_end multiples of 32), with the same results as
// matmul_rows_scalar.
void matmul_rows_avx512(const MatmulArgs& a, int64_t row_begin, int64_t row_end);
// Quantised types only, with AVX-512 VNNI (vpdpbusd); same results as matmul_rows_avx512, and interleaved
// Q8_0 (row_begin, row_end multiples of 16) with the same results as matmul_rows_scalar.
void matmul_rows_avx512_vnni(const MatmulArgs& a, int64_t row_begin, int64_t row_end);
// Block b of row r of a Q8_0 matrix, plain or interleaved: its scale d and its 32 quants q.
void q8_0_block(const MatmulArgs& a, int64_t r, int64_t b, float* d, int8_t* q);
// Element (r, c) of an interleaved F16 / BF16 matrix, in f32.
float half_element(const MatmulArgs& a, int64_t r, int64_t c);

}  // namespace inflight::kernels::cpu

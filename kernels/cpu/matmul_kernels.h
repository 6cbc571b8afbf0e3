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
  // Q8_0 only: x quantised by quantize_activations_q8_0, one row per token.
  const int8_t* xq = nullptr;  // [num_tokens, cols]
  const float* xd = nullptr;   // [num_tokens, cols / 32] block scales
};

// Quantises one activation row for the Q8_0 integer dot products: per block of 32, d = amax / 127 (f32),
// q = x * (1 / d) rounded to nearest even, so |q| <= 127. n: a multiple of 32.
void quantize_activations_q8_0(const float* x, int64_t n, int8_t* q, float* d);

// Computes y[t, r] for r in [row_begin, row_end), t < num_tokens:
//   F32 / F16 / BF16: sum_c W[r, c] * x[t, c];
//   Q8_0: sum_b (dw[r, b] * xd[t, b]) * (sum_{i < 32} qw[r, b, i] * xq[t, b, i]), the inner sum exact in
//   int32 (llama.cpp's q8_0 x q8_0 dot; the activation rounding is the only loss against f32 math).
// Within one ISA the summation order of each y[t, r] depends only on cols (batch invariance).
void matmul_rows_scalar(const MatmulArgs& a, int64_t row_begin, int64_t row_end);
void matmul_rows_avx2(const MatmulArgs& a, int64_t row_begin, int64_t row_end);
void matmul_rows_avx512(const MatmulArgs& a, int64_t row_begin, int64_t row_end);
// Q8_0 only, with AVX-512 VNNI (vpdpbusd); same results as matmul_rows_avx512.
void matmul_rows_avx512_vnni(const MatmulArgs& a, int64_t row_begin, int64_t row_end);

}  // namespace inflight::kernels::cpu

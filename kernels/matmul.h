// Weight matrix products: y = x · Wᵀ for every weight dtype, multi-threaded on the compute pool.
#pragma once
#include <cstdint>

#include "kernels/dtype.h"

namespace inflight::kernels {

// A row-major weight matrix [rows (out features), cols (in features)], as stored in GGUF/safetensors.
struct WeightMatrix {
  DType dtype = DType::F32;
  const void* data = nullptr;  // rows * row_bytes(dtype, cols) bytes
  int64_t rows = 0;
  int64_t cols = 0;
};

// y[t, r] = sum_c x[t, c] * W[r, c] for t < num_tokens.
// x: [num_tokens, W.cols] f32, y: [num_tokens, W.rows] f32.
// NOTE: each y[t, r] is summed in the same order whatever num_tokens is, so a token's result does not
// depend on which other tokens share the batch (batch invariance).
void matmul(const WeightMatrix& w, const float* x, float* y, int64_t num_tokens);

}  // namespace inflight::kernels

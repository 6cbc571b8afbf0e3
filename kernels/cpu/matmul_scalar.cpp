// The scalar matmul: always compiled, defines the semantics the SIMD versions approximate.
// y[t, r] = sum over c in increasing order of dequant(W[r, c]) * x[t, c], one f32 accumulator.
#include <vector>

#include "kernels/cpu/matmul_kernels.h"

namespace inflight::kernels::cpu {

void matmul_rows_scalar(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
  thread_local std::vector<float> row;  // [cols] the dequantised weight row
  row.resize(size_t(a.cols));
  for (int64_t r = row_begin; r < row_end; ++r) {
    dequantize_row(a.dtype, a.w + r * a.w_row_bytes, row.data(), a.cols);
    for (int64_t t = 0; t < a.num_tokens; ++t) {
      const float* xt = a.x + t * a.cols;
      float sum = 0.0f;
      for (int64_t c = 0; c < a.cols; ++c) sum += row[size_t(c)] * xt[c];
      a.y[t * a.rows + r] = sum;
    }
  }
}

}  // namespace inflight::kernels::cpu

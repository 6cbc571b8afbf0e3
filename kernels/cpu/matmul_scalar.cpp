// The scalar matmul: always compiled, defines the semantics the SIMD versions approximate.
//   F32 / F16 / BF16: y[t, r] = sum over c in increasing order of W[r, c] * x[t, c], one f32 accumulator;
//   F16 / BF16 interleaved: the same with each step one std::fma (the AVX-512 kernel's FMA chain).
//   Q8_0: y[t, r] = sum over blocks b in increasing order of (dw * xd) * float(exact int32 block dot).
//   Q4_0 .. Q6_K: matmul_quant_scalar.cpp.
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/matmul_kernels.h"
#include "kernels/matmul.h"

namespace inflight::kernels::cpu {
namespace {

void matmul_rows_q8_0(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
  const int64_t num_blocks = a.cols / kQ8BlockSize;
  for (int64_t r = row_begin; r < row_end; ++r) {
    for (int64_t t = 0; t < a.num_tokens; ++t) {
      const int8_t* xq = a.xq + t * a.cols;
      const float* xd = a.xd + t * num_blocks;
      float sum = 0.0f;
      for (int64_t b = 0; b < num_blocks; ++b) {
        float dw;
        int8_t qw[kQ8BlockSize];
        q8_0_block(a, r, b, &dw, qw);
        int32_t dot = 0;
        for (int i = 0; i < kQ8BlockSize; ++i) dot += int32_t(qw[i]) * int32_t(xq[b * kQ8BlockSize + i]);
        sum += (dw * xd[b]) * float(dot);
      }
      a.y[t * a.rows + r] = sum;
    }
  }
}

// (Reads x's rows, not the packed MatmulArgs::xt.)
void matmul_rows_half_interleaved(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    for (int64_t t = 0; t < a.num_tokens; ++t) {
      const float* xt = a.x + t * a.cols;
      float sum = 0.0f;
      for (int64_t c = 0; c < a.cols; ++c) sum = std::fma(half_element(a, r, c), xt[c], sum);
      a.y[t * a.rows + r] = sum;
    }
  }
}

}  // namespace

float half_element(const MatmulArgs& a, int64_t r, int64_t c) {
  const uint8_t* p = a.w + ((r / kHalfInterleavedRows) * a.cols + c) * 2 * kHalfInterleavedRows + (r % kHalfInterleavedRows) * 2;
  uint16_t h;
  std::memcpy(&h, p, 2);
  return a.dtype == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
}

void q8_0_block(const MatmulArgs& a, int64_t r, int64_t b, float* d, int8_t* q) {
  uint16_t d16;
  if (!a.interleaved) {
    const uint8_t* blk = a.w + r * a.w_row_bytes + b * kQ8BlockBytes;
    std::memcpy(&d16, blk, 2);
    std::memcpy(q, blk + 2, kQ8BlockSize);
  } else {  // see kInterleavedBlockBytes
    const int64_t g = r / kInterleavedRows, i = r % kInterleavedRows;
    const uint8_t* blk = a.w + (g * (a.cols / kQ8BlockSize) + b) * kInterleavedBlockBytes;
    std::memcpy(&d16, blk + 2 * i, 2);
    for (int k = 0; k < kQ8BlockSize; ++k) q[k] = int8_t(blk[2 * kInterleavedRows + (k / 4) * 4 * kInterleavedRows + 4 * i + k % 4] ^ 0x80);
  }
  *d = f16_to_f32(d16);
}

void matmul_rows_scalar(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
  if (a.dtype == DType::Q8_0) {
    matmul_rows_q8_0(a, row_begin, row_end);
    return;
  }
  if (is_kquant(a.dtype) || is_legacy_quant(a.dtype)) {
    matmul_rows_quant_scalar(a, row_begin, row_end);
    return;
  }
  if (a.interleaved) {
    matmul_rows_half_interleaved(a, row_begin, row_end);
    return;
  }
  thread_local std::vector<float> row;  // [cols] the weight row in f32
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

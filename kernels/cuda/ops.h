// The model's row and elementwise kernels on the GPU, the CUDA twins of kernels/ops.h, on f32 activations.
// A kernel whose output feeds a matrix product writes it in the matrix's element type (out_elem), so the
// GEMM reads it as it is. Every launcher queues on `stream` and returns.
#pragma once
#include <cstdint>

#include <cuda_runtime_api.h>

namespace inflight::kernels::cuda {

// How a weight matrix (and the activations multiplied with it) is stored on the GPU.
enum class Elem : uint8_t { F32, F16, BF16 };

// out[t] = row ids[t] of table ([rows, cols] of elem) in f32.
void embed_rows(const void* table, Elem elem, int64_t cols, const int32_t* ids, int64_t num_rows, float* out,
                cudaStream_t stream);

// Per row of cols: with residual, x += residual first (x is written back); then out = weight * (x / rms(x)),
// rms = sqrt(mean(x^2) + eps), as kernels::rms_norm / add_rms_norm, rounded to out_elem (to nearest even).
// out may alias x or residual.
void rms_norm(float* x, const float* residual, const float* weight, void* out, Elem out_elem, int64_t rows,
              int64_t cols, float eps, cudaStream_t stream);

// In place, each head [head_dim] of each token (heads of a token at x + t * token_stride, one after another):
// x = weight * (x / rms(x)), the per-head q / k norm of Qwen 3.
void head_rms_norm(float* x, const float* weight, int64_t tokens, int heads, int head_dim, int64_t token_stride,
                   float eps, cudaStream_t stream);

// x[r, c] += bias[c].
void add_bias(float* x, const float* bias, int64_t rows, int64_t cols, cudaStream_t stream);

// out[r, c] = silu(gate_up[r, c]) * gate_up[r, cols + c] (each row of gate_up: the gate's cols, then up's),
// rounded to out_elem.
void silu_mul(const float* gate_up, void* out, Elem out_elem, int64_t rows, int64_t cols, cudaStream_t stream);

// x += y, n elements.
void add(float* x, const float* y, int64_t n, cudaStream_t stream);

// out = x rounded to elem (to nearest even), n elements.
void convert(const float* x, Elem elem, void* out, int64_t n, cudaStream_t stream);

// out[r] = x[rows[r]], rows of cols floats.
void gather_rows(const float* x, const int32_t* rows, int64_t num_rows, int64_t cols, float* out,
                 cudaStream_t stream);

}  // namespace inflight::kernels::cuda

// The model's row and elementwise kernels on the GPU, the CUDA twins of kernels/ops.h: f32 activations in and
// out (the GEMMs' half operands come from convert). Every launcher queues on `stream` and returns.
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
// rms = sqrt(mean(x^2) + eps), as kernels::rms_norm / add_rms_norm. out may alias x or residual.
void rms_norm(float* x, const float* residual, const float* weight, float* out, int64_t rows, int64_t cols,
              float eps, cudaStream_t stream);

// x[r, c] += bias[c].
void add_bias(float* x, const float* bias, int64_t rows, int64_t cols, cudaStream_t stream);

// out = silu(gate) * up, n elements (out may alias gate).
void silu_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream);

// x += y, n elements.
void add(float* x, const float* y, int64_t n, cudaStream_t stream);

// out = x rounded to elem (F16 or BF16, to nearest even), n elements.
void convert(const float* x, Elem elem, void* out, int64_t n, cudaStream_t stream);

// out[r] = x[rows[r]], rows of cols floats.
void gather_rows(const float* x, const int32_t* rows, int64_t num_rows, int64_t cols, float* out,
                 cudaStream_t stream);

}  // namespace inflight::kernels::cuda

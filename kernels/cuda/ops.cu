// The model's row and elementwise kernels on the GPU (ops.h).
#include "kernels/cuda/ops.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_common.cuh"

namespace inflight::kernels::cuda {

namespace {

using detail::warp_sum;

constexpr int kThreads = 256;

int blocks_for(int64_t n) { return int((n + kThreads - 1) / kThreads); }

__device__ inline float load(const float* p, int64_t i) { return p[i]; }
__device__ inline float load(const __half* p, int64_t i) { return __half2float(p[i]); }
__device__ inline float load(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }

template <class T>
__global__ void embed_kernel(const T* table, int64_t cols, const int32_t* ids, float* out) {
  const int64_t t = blockIdx.x;
  const T* row = table + int64_t(ids[t]) * cols;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) out[t * cols + c] = load(row, c);
}

// One block per row: the sum of squares over the block, then the scaled row.
__global__ void rms_norm_kernel(float* x, const float* residual, const float* weight, float* out, int64_t cols,
                                float eps) {
  __shared__ float partial[kThreads / 32];
  const int64_t r = blockIdx.x;
  float* xr = x + r * cols;
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    float v = xr[c];
    if (residual != nullptr) {
      v += residual[r * cols + c];
      xr[c] = v;
    }
    ss = fmaf(v, v, ss);
  }
  ss = warp_sum(ss);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = ss;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < kThreads / 32; ++w) total += partial[w];
  const float inv = 1.0f / sqrtf(total / float(cols) + eps);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) out[r * cols + c] = weight[c] * (inv * xr[c]);
}

__global__ void add_bias_kernel(float* x, const float* bias, int64_t n, int64_t cols) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) x[i] += bias[i % cols];
}

__global__ void silu_mul_kernel(const float* gate, const float* up, float* out, int64_t n) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float g = gate[i];
  out[i] = g / (1.0f + expf(-g)) * up[i];
}

__global__ void add_kernel(float* x, const float* y, int64_t n) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) x[i] += y[i];
}

__global__ void to_f16_kernel(const float* x, __half* out, int64_t n) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = __float2half_rn(x[i]);
}
__global__ void to_bf16_kernel(const float* x, __nv_bfloat16* out, int64_t n) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = __float2bfloat16_rn(x[i]);
}

__global__ void gather_kernel(const float* x, const int32_t* rows, int64_t cols, float* out) {
  const int64_t r = blockIdx.x;
  const float* src = x + int64_t(rows[r]) * cols;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) out[r * cols + c] = src[c];
}

}  // namespace

void embed_rows(const void* table, Elem elem, int64_t cols, const int32_t* ids, int64_t num_rows, float* out,
                cudaStream_t stream) {
  if (num_rows == 0) return;
  switch (elem) {
    case Elem::F32:
      embed_kernel<<<unsigned(num_rows), kThreads, 0, stream>>>(static_cast<const float*>(table), cols, ids, out);
      break;
    case Elem::F16:
      embed_kernel<<<unsigned(num_rows), kThreads, 0, stream>>>(static_cast<const __half*>(table), cols, ids, out);
      break;
    case Elem::BF16:
      embed_kernel<<<unsigned(num_rows), kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(table), cols, ids,
                                                                  out);
      break;
  }
  INFLIGHT_CUDA_CHECK(cudaGetLastError());
}

void rms_norm(float* x, const float* residual, const float* weight, float* out, int64_t rows, int64_t cols,
              float eps, cudaStream_t stream) {
  if (rows == 0) return;
  rms_norm_kernel<<<unsigned(rows), kThreads, 0, stream>>>(x, residual, weight, out, cols, eps);
  INFLIGHT_CUDA_CHECK(cudaGetLastError());
}

void add_bias(float* x, const float* bias, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows * cols == 0) return;
  add_bias_kernel<<<blocks_for(rows * cols), kThreads, 0, stream>>>(x, bias, rows * cols, cols);
  INFLIGHT_CUDA_CHECK(cudaGetLastError());
}

void silu_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  silu_mul_kernel<<<blocks_for(n), kThreads, 0, stream>>>(gate, up, out, n);
  INFLIGHT_CUDA_CHECK(cudaGetLastError());
}

void add(float* x, const float* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  add_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, y, n);
  INFLIGHT_CUDA_CHECK(cudaGetLastError());
}

void convert(const float* x, Elem elem, void* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (elem == Elem::F16) to_f16_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, static_cast<__half*>(out), n);
  else to_bf16_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, static_cast<__nv_bfloat16*>(out), n);
  INFLIGHT_CUDA_CHECK(cudaGetLastError());
}

void gather_rows(const float* x, const int32_t* rows, int64_t num_rows, int64_t cols, float* out,
                 cudaStream_t stream) {
  if (num_rows == 0) return;
  gather_kernel<<<unsigned(num_rows), kThreads, 0, stream>>>(x, rows, cols, out);
  INFLIGHT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace inflight::kernels::cuda

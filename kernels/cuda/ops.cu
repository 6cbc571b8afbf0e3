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

unsigned blocks_for(int64_t n) { return unsigned((n + kThreads - 1) / kThreads); }

__device__ inline float load(const float* p, int64_t i) { return p[i]; }
__device__ inline float load(const __half* p, int64_t i) { return __half2float(p[i]); }
__device__ inline float load(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ inline void store(float* p, int64_t i, float v) { p[i] = v; }
__device__ inline void store(__half* p, int64_t i, float v) { p[i] = __float2half_rn(v); }
__device__ inline void store(__nv_bfloat16* p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }

// Calls f with out cast to the element type elem names.
template <class F>
void with_elem(Elem elem, void* out, F&& f) {
  switch (elem) {
    case Elem::F32: f(static_cast<float*>(out)); break;
    case Elem::F16: f(static_cast<__half*>(out)); break;
    case Elem::BF16: f(static_cast<__nv_bfloat16*>(out)); break;
  }
}

template <class T>
__global__ void embed_kernel(const T* table, int64_t cols, const int32_t* ids, float* out) {
  const int64_t t = blockIdx.x;
  const T* row = table + int64_t(ids[t]) * cols;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) out[t * cols + c] = load(row, c);
}

// The sum over the block of each thread's part (every thread gets it).
__device__ float block_sum(float v) {
  __shared__ float partial[kThreads / 32];
  v = warp_sum(v);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < kThreads / 32; ++w) total += partial[w];
  return total;
}

// One block per row: the sum of squares over the block, then the scaled row.
template <class T>
__global__ void rms_norm_kernel(float* x, const float* residual, const float* weight, T* out, int64_t cols,
                                float eps) {
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
  const float inv = 1.0f / sqrtf(block_sum(ss) / float(cols) + eps);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) store(out, r * cols + c, weight[c] * (inv * xr[c]));
}

// One warp per head.
__global__ void head_rms_norm_kernel(float* x, const float* weight, int64_t num_heads, int heads, int head_dim,
                                     int64_t token_stride, float eps) {
  const int64_t head = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32;
  if (head >= num_heads) return;
  const int lane = threadIdx.x % 32;
  float* xh = x + (head / heads) * token_stride + (head % heads) * int64_t(head_dim);
  float ss = 0.0f;
  for (int c = lane; c < head_dim; c += 32) ss = fmaf(xh[c], xh[c], ss);
  const float inv = 1.0f / sqrtf(warp_sum(ss) / float(head_dim) + eps);
  for (int c = lane; c < head_dim; c += 32) xh[c] = weight[c] * (inv * xh[c]);
}

__global__ void add_bias_kernel(float* x, const float* bias, int64_t n, int64_t cols) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) x[i] += bias[i % cols];
}

template <class T>
__global__ void silu_mul_kernel(const float* gate_up, T* out, int64_t n, int64_t cols) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const int64_t r = i / cols, c = i % cols;
  const float g = gate_up[r * 2 * cols + c];
  store(out, i, g / (1.0f + expf(-g)) * gate_up[r * 2 * cols + cols + c]);
}

__global__ void add_kernel(float* x, const float* y, int64_t n) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) x[i] += y[i];
}

template <class T>
__global__ void convert_kernel(const float* x, T* out, int64_t n) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) store(out, i, x[i]);
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
  with_elem(elem, const_cast<void*>(table), [&](auto* t) {
    embed_kernel<<<unsigned(num_rows), kThreads, 0, stream>>>(t, cols, ids, out);
  });
  INFLIGHT_CUDA_CHECK(cudaGetLastError());
}

void rms_norm(float* x, const float* residual, const float* weight, void* out, Elem out_elem, int64_t rows,
              int64_t cols, float eps, cudaStream_t stream) {
  if (rows == 0) return;
  with_elem(out_elem, out, [&](auto* o) {
    rms_norm_kernel<<<unsigned(rows), kThreads, 0, stream>>>(x, residual, weight, o, cols, eps);
  });
  INFLIGHT_CUDA_CHECK(cudaGetLastError());
}

void head_rms_norm(float* x, const float* weight, int64_t tokens, int heads, int head_dim, int64_t token_stride,
                   float eps, cudaStream_t stream) {
  const int64_t num_heads = tokens * heads;
  if (num_heads == 0) return;
  constexpr int kHeadsPerBlock = kThreads / 32;
  head_rms_norm_kernel<<<unsigned((num_heads + kHeadsPerBlock - 1) / kHeadsPerBlock), kThreads, 0, stream>>>(
      x, weight, num_heads, heads, head_dim, token_stride, eps);
  INFLIGHT_CUDA_CHECK(cudaGetLastError());
}

void add_bias(float* x, const float* bias, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows * cols == 0) return;
  add_bias_kernel<<<blocks_for(rows * cols), kThreads, 0, stream>>>(x, bias, rows * cols, cols);
  INFLIGHT_CUDA_CHECK(cudaGetLastError());
}

void silu_mul(const float* gate_up, void* out, Elem out_elem, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows * cols == 0) return;
  with_elem(out_elem, out, [&](auto* o) {
    silu_mul_kernel<<<blocks_for(rows * cols), kThreads, 0, stream>>>(gate_up, o, rows * cols, cols);
  });
  INFLIGHT_CUDA_CHECK(cudaGetLastError());
}

void add(float* x, const float* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  add_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, y, n);
  INFLIGHT_CUDA_CHECK(cudaGetLastError());
}

void convert(const float* x, Elem elem, void* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  with_elem(elem, out, [&](auto* o) { convert_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, o, n); });
  INFLIGHT_CUDA_CHECK(cudaGetLastError());
}

void gather_rows(const float* x, const int32_t* rows, int64_t num_rows, int64_t cols, float* out,
                 cudaStream_t stream) {
  if (num_rows == 0) return;
  gather_kernel<<<unsigned(num_rows), kThreads, 0, stream>>>(x, rows, cols, out);
  INFLIGHT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace inflight::kernels::cuda

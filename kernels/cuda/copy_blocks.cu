// The batched block copy (copy_blocks.h): a block per (pair, layer), in the widest unit that divides the sizes.
#include "kernels/cuda/copy_blocks.h"

#include "kernels/cuda/device_common.cuh"

namespace inflight::kernels::cuda {

namespace {

template <class Unit>
__global__ void copy_blocks_kernel(uint8_t* base, int64_t layer_stride, int64_t block_bytes, const int32_t* pairs) {
  uint8_t* layer = base + int64_t(blockIdx.y) * layer_stride;
  const Unit* src = reinterpret_cast<const Unit*>(layer + int64_t(pairs[2 * blockIdx.x]) * block_bytes);
  Unit* dst = reinterpret_cast<Unit*>(layer + int64_t(pairs[2 * blockIdx.x + 1]) * block_bytes);
  const int64_t n = block_bytes / int64_t(sizeof(Unit));
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
}

}  // namespace

void copy_blocks(void* base, int64_t layer_stride, int64_t block_bytes, int num_layers, const int32_t* pairs,
                 int num_pairs, cudaStream_t stream) {
  if (num_pairs == 0 || num_layers == 0 || block_bytes == 0) return;
  const dim3 grid{unsigned(num_pairs), unsigned(num_layers)};
  uint8_t* b = static_cast<uint8_t*>(base);
  const auto aligned = [&](int64_t unit) {
    return block_bytes % unit == 0 && layer_stride % unit == 0 && reinterpret_cast<uintptr_t>(base) % unit == 0;
  };
  if (aligned(16)) copy_blocks_kernel<uint4><<<grid, 256, 0, stream>>>(b, layer_stride, block_bytes, pairs);
  else if (aligned(4)) copy_blocks_kernel<uint32_t><<<grid, 256, 0, stream>>>(b, layer_stride, block_bytes, pairs);
  else copy_blocks_kernel<uint8_t><<<grid, 256, 0, stream>>>(b, layer_stride, block_bytes, pairs);
  INFLIGHT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace inflight::kernels::cuda

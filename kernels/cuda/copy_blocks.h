// The KV cache's batched block copy on the device (copy-on-write and forks of cache::KvCache): every queued
// (src, dst) pair in every layer, in one launch.
#pragma once
#include <cstdint>

#include <cuda_runtime_api.h>

namespace inflight::kernels::cuda {

// For each pair i and each layer l: block_bytes bytes from base + l * layer_stride + pairs[2i] * block_bytes
// to base + l * layer_stride + pairs[2i + 1] * block_bytes. pairs: device [2 * num_pairs]; base: device.
void copy_blocks(void* base, int64_t layer_stride, int64_t block_bytes, int num_layers, const int32_t* pairs,
                 int num_pairs, cudaStream_t stream);

}  // namespace inflight::kernels::cuda

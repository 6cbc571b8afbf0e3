// CudaModel: the forward pass of model.cpp on an NVIDIA GPU, for Model (model.h) to run when its device is
// Device::Cuda. The weights go up once, at construction; each forward uploads the batch's metadata in one
// copy, runs every layer on one stream (cuBLAS GEMMs with f32 accumulation, the fused RoPE + KV append and
// attention of kernels/cuda), and copies back only the logits rows the engine samples from.
#pragma once
#include <cstdint>
#include <memory>

#include "cache/kv_cache.h"
#include "engine/batch.h"
#include "engine/weights.h"

namespace inflight::engine {

class CudaModel {
 public:
  // Weights of F32 stay F32 and BF16 stay BF16; every other type (F16 and the quantized ones, dequantized
  // exactly) is stored as F16. Throws std::runtime_error when the GPU is short of memory.
  explicit CudaModel(const ModelWeights& w);
  ~CudaModel();
  CudaModel(const CudaModel&) = delete;
  CudaModel& operator=(const CudaModel&) = delete;

  // As Model::forward, in one pass; kv must live on the GPU (KvDevice::Cuda). Runs the KV cache's queued
  // block copies first.
  void forward(const ScheduledBatch& batch, cache::KvCache& kv, float* logits);

  int64_t weight_bytes() const;  // GPU memory of the weights
  int64_t scratch_bytes() const;  // GPU memory of the activations, for the largest step so far

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace inflight::engine

// Runs kernels::cuda on a step described with host pointers, as the CPU tests describe it: every buffer the
// params name is copied to the device, the step runs there, and the output and the cache (data and int8
// scales) come back into the host buffers. So every CPU test batch (attention_test_support.h) runs on the
// GPU unchanged, and the results compare with reference::attention and cpu::attention directly.
#pragma once
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/cuda/attention.h"

namespace inflight::test {

inline void cuda_ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  std::abort();
}

// One device copy of a host range; freed with the object.
class DeviceCopy {
 public:
  DeviceCopy(const void* host, size_t bytes) : bytes_(bytes) {
    if (host == nullptr || bytes == 0) return;
    cuda_ok(cudaMalloc(&ptr_, bytes), "cudaMalloc");
    cuda_ok(cudaMemcpy(ptr_, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
  }
  DeviceCopy(const DeviceCopy&) = delete;
  DeviceCopy& operator=(const DeviceCopy&) = delete;
  ~DeviceCopy() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  template <class T>
  T* as() const { return static_cast<T*>(ptr_); }
  void copy_back(void* host) const {
    if (ptr_ != nullptr) cuda_ok(cudaMemcpy(host, ptr_, bytes_, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// p with host pointers; appends when p.k is set (the cache in host memory is updated), attends every row.
// prompt_kernel: sequences with two or more rows go to the tensor-core prompt kernel (BatchShape::host_q_start);
// else the span routine serves every row.
inline void cuda_attention(const kernels::AttentionParams& p, kernels::cuda::DecodePlan plan = {},
                           bool prompt_kernel = true) {
  using kernels::AttentionParams;
  const int S = p.num_seqs;
  const int64_t T = p.q_start[S];
  const kernels::PagedKvView& kv = p.kv;
  int max_kv = 0;
  int64_t mask_extent = 0;  // elements of the mask the step reads
  for (int s = 0; s < S; ++s) {
    const int q_len = p.q_start[s + 1] - p.q_start[s], total = p.past_len[s] + q_len;
    max_kv = std::max(max_kv, total);
    if (p.mask.kind != kernels::MaskKind::None && q_len > 0 && total > 0)
      mask_extent = std::max(mask_extent, s * p.mask.seq_stride + (p.num_q_heads - 1) * p.mask.head_stride +
                                              int64_t(q_len - 1) * p.mask.row_stride + total);
  }
  const int64_t q_elems = T > 0 ? (T - 1) * p.q_stride + int64_t(p.num_q_heads) * p.head_dim : 0;
  const int64_t k_elems = T > 0 && p.k ? (T - 1) * p.k_stride + int64_t(p.num_kv_heads) * p.head_dim : 0;
  const int64_t v_elems = T > 0 && p.v ? (T - 1) * p.v_stride + int64_t(p.num_kv_heads) * p.head_dim : 0;
  const int64_t out_elems = T * p.num_q_heads * p.head_dim_v;
  const size_t data_bytes = size_t(kv.num_blocks) * 2 * kv.num_kv_heads * kv.block_size * kv.head_dim *
                            kernels::kv_elem_bytes(kv.dtype);
  const size_t scale_bytes =
      kv.scales ? size_t(kv.num_blocks) * 2 * kv.num_kv_heads * kv.block_size * kv.num_scale_groups() * 4 : 0;
  const size_t mask_bytes = size_t(mask_extent) * (p.mask.kind == kernels::MaskKind::Bool ? 1 : 4);

  DeviceCopy q(p.q, size_t(q_elems) * 4), k(p.k, size_t(k_elems) * 4), v(p.v, size_t(v_elems) * 4);
  DeviceCopy out(p.out, size_t(out_elems) * 4);
  DeviceCopy data(kv.data, data_bytes), scales(kv.scales, scale_bytes);
  DeviceCopy tables(kv.block_tables, size_t(S) * kv.max_blocks_per_seq * 4);
  DeviceCopy q_start(p.q_start, size_t(S + 1) * 4), past(p.past_len, size_t(S) * 4);
  DeviceCopy slots(p.slot_mapping, p.slot_mapping ? size_t(T) * 8 : 0);
  DeviceCopy positions(p.positions, p.positions ? size_t(T) * 4 : 0);
  DeviceCopy mask(p.mask.data, mask_bytes);
  DeviceCopy indir(p.cache_indir, p.cache_indir ? size_t(S) * p.cache_indir_stride * 4 : 0);
  DeviceCopy row0(p.beam_row0, p.beam_row0 ? size_t(S) * 4 : 0);
  std::vector<float> table;
  if (p.rope_on()) kernels::cuda::rope_table(p.rope, p.positions, T, &table);
  DeviceCopy rope(table.data(), table.size() * 4);

  AttentionParams d = p;
  d.q = q.as<float>();
  d.k = p.k ? k.as<float>() : nullptr;
  d.v = p.v ? v.as<float>() : nullptr;
  d.out = out.as<float>();
  d.kv.data = data.as<void>();
  d.kv.scales = kv.scales ? scales.as<float>() : nullptr;
  d.kv.block_tables = tables.as<int32_t>();
  d.q_start = q_start.as<int32_t>();
  d.past_len = past.as<int32_t>();
  d.slot_mapping = p.slot_mapping ? slots.as<int64_t>() : nullptr;
  d.positions = p.positions ? positions.as<int32_t>() : nullptr;
  d.mask.data = p.mask.data ? mask.as<void>() : nullptr;
  d.cache_indir = p.cache_indir ? indir.as<int32_t>() : nullptr;
  d.beam_row0 = p.beam_row0 ? row0.as<int32_t>() : nullptr;

  kernels::cuda::BatchShape shape;
  shape.num_tokens = int(T);
  shape.max_kv_len = max_kv;
  shape.rope_cos_sin = table.empty() ? nullptr : rope.as<float>();
  if (prompt_kernel) shape.host_q_start = p.q_start;
  kernels::cuda::Workspace ws;
  kernels::cuda::append_kv(d, shape, nullptr);
  kernels::cuda::attend(d, shape, plan, ws, nullptr);
  cuda_ok(cudaDeviceSynchronize(), "cuda attention");
  out.copy_back(p.out);
  data.copy_back(kv.data);
  if (kv.scales) scales.copy_back(kv.scales);
}

}  // namespace inflight::test

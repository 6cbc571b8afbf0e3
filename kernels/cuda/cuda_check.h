// INFLIGHT_CUDA_CHECK: aborts with file:line and the runtime's message when a CUDA call fails. Host only, so
// that plain C++ files (cache/kv_cache.cpp) use the same check as the kernels' launchers.
#pragma once
#include <cstdio>
#include <cstdlib>

#include <cuda_runtime_api.h>

namespace inflight::kernels::cuda::detail {

inline void check_cuda(cudaError_t e, const char* what, const char* file, int line) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "%s:%d: %s: %s\n", file, line, what, cudaGetErrorString(e));
  std::abort();
}

}  // namespace inflight::kernels::cuda::detail

#define INFLIGHT_CUDA_CHECK(x) ::inflight::kernels::cuda::detail::check_cuda((x), #x, __FILE__, __LINE__)

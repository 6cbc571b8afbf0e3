// INFLIGHT_HD marks the inline formulas that the CPU kernels and the CUDA kernels share (KV dtype
// conversions, RoPE rotation, paged-view addressing): one source, compiled for host and device by nvcc,
// for the host alone by the C++ compiler.
#pragma once
#if defined(__CUDACC__)
#define INFLIGHT_HD __host__ __device__
#else
#define INFLIGHT_HD
#endif

// CUDA attention throughput (kernels/cuda/attention.h), next to what the GPU does at best in the same process:
//   - copy: a 2 GiB device-to-device cudaMemcpy, in GB/s counting bytes read and written;
//   - decode: one query row per sequence over 8k and 32k cached keys, batch 1/16/64/256, 32 query / 8 KV
//     heads, head dim 128, f16 / bf16 / int8 / fp8-e4m3, in GB/s of KV read (K, V and int8 scales) and as a
//     share of the copy; int8 and fp8 also as a speed-up over f16 at the same shape;
//   - context: one causal prefill of 4096 rows over its own keys, 32 query / 8 KV heads, head dim 128, f16 and
//     bf16, in TFLOP/s (QK and PV, causal half), next to a cuBLAS f16 GEMM with f32 accumulation of the
//     matching size (32 x [4096 x 128] x [128 x 4096]).
// Each figure is the median of the timed repetitions (CUDA events). Output: a table, then one JSON line per
// case for RESULTS.md.
//
//   ./bench_attention_cuda            # every case
//   ./bench_attention_cuda --quick    # 8k decode at batch 1 and 64, f16 and int8, and the context case
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda/attention.h"

namespace {

using namespace inflight::kernels;

constexpr int kNumQHeads = 32, kNumKvHeads = 8, kHeadDim = 128, kBlockSize = 16;

void ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}

template <class F>
double median_ms(int reps, F&& run) {
  cudaEvent_t a, b;
  ok(cudaEventCreate(&a), "event");
  ok(cudaEventCreate(&b), "event");
  for (int i = 0; i < 3; ++i) run();  // warm-up
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    ok(cudaEventRecord(a), "record");
    run();
    ok(cudaEventRecord(b), "record");
    ok(cudaEventSynchronize(b), "sync");
    float t = 0.0f;
    ok(cudaEventElapsedTime(&t, a, b), "elapsed");
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

double copy_gbps() {
  const size_t bytes = size_t(1) << 30;
  void *src, *dst;
  ok(cudaMalloc(&src, bytes), "malloc");
  ok(cudaMalloc(&dst, bytes), "malloc");
  ok(cudaMemset(src, 1, bytes), "memset");
  const double ms = median_ms(10, [&] { ok(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice), "copy"); });
  cudaFree(src);
  cudaFree(dst);
  return 2.0 * double(bytes) / (ms * 1e-3) / 1e9;
}

// A device buffer of n elements of T, freed with the object.
template <class T>
struct Buffer {
  T* p = nullptr;
  explicit Buffer(size_t n) { ok(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)), "cudaMalloc"); }
  ~Buffer() { cudaFree(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void upload(const std::vector<T>& v) { ok(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), "upload"); }
};

// `batch` sequences of kv_len cached keys and q_len new rows each (already in the cache), their blocks laid
// out one sequence after another; every cache byte 0x11 (a small finite value in every dtype).
struct Step {
  int batch, kv_len, q_len;
  KvDType dtype;
  int64_t num_blocks, blocks_per_seq;
  Buffer<uint8_t> data;
  Buffer<float> scales;
  Buffer<int32_t> tables, q_start, past;
  Buffer<float> q, out;
  AttentionParams p;
  cuda::BatchShape shape;
  std::vector<int32_t> host_q_start;

  Step(int batch_, int kv_len_, int q_len_, KvDType dtype_)
      : batch(batch_), kv_len(kv_len_), q_len(q_len_), dtype(dtype_),
        num_blocks(int64_t(batch_) * ((kv_len_ + kBlockSize - 1) / kBlockSize)),
        blocks_per_seq((kv_len_ + kBlockSize - 1) / kBlockSize),
        data(size_t(num_blocks) * 2 * kNumKvHeads * kBlockSize * kHeadDim * kv_elem_bytes(dtype_)),
        scales(kv_has_group_scales(dtype_) ? size_t(num_blocks) * 2 * kNumKvHeads * kBlockSize : 1),
        tables(size_t(num_blocks)), q_start(size_t(batch_) + 1), past(size_t(batch_)),
        q(size_t(batch_) * q_len_ * kNumQHeads * kHeadDim), out(size_t(batch_) * q_len_ * kNumQHeads * kHeadDim) {
    ok(cudaMemset(data.p, 0x11, size_t(num_blocks) * 2 * kNumKvHeads * kBlockSize * kHeadDim * kv_elem_bytes(dtype)), "memset");
    if (kv_has_group_scales(dtype)) ok(cudaMemset(scales.p, 0x11, size_t(num_blocks) * 2 * kNumKvHeads * kBlockSize * 4), "memset");
    std::vector<int32_t> t(static_cast<size_t>(num_blocks)), qs(static_cast<size_t>(batch) + 1), ps(static_cast<size_t>(batch));
    for (int64_t i = 0; i < num_blocks; ++i) t[size_t(i)] = int32_t(i);
    for (int s = 0; s <= batch; ++s) qs[size_t(s)] = s * q_len;
    for (int s = 0; s < batch; ++s) ps[size_t(s)] = kv_len - q_len;
    tables.upload(t);
    q_start.upload(qs);
    past.upload(ps);
    std::vector<float> hq(size_t(batch) * q_len * kNumQHeads * kHeadDim);
    uint32_t x = 1;
    for (float& v : hq) v = float((x = x * 1664525u + 1013904223u) >> 8) / float(1 << 24) - 0.5f;
    q.upload(hq);

    p.q = q.p;
    p.q_stride = int64_t(kNumQHeads) * kHeadDim;
    p.out = out.p;
    p.num_q_heads = kNumQHeads;
    p.num_kv_heads = kNumKvHeads;
    p.head_dim = p.head_dim_v = kHeadDim;
    p.num_seqs = batch;
    p.q_start = q_start.p;
    p.past_len = past.p;
    p.kv.data = data.p;
    p.kv.dtype = dtype;
    p.kv.num_blocks = int(num_blocks);
    p.kv.block_size = kBlockSize;
    p.kv.num_kv_heads = kNumKvHeads;
    p.kv.head_dim = kHeadDim;
    p.kv.block_tables = tables.p;
    p.kv.max_blocks_per_seq = int(blocks_per_seq);
    if (kv_has_group_scales(dtype)) {
      p.kv.scales = scales.p;
      p.kv.quant_group = kHeadDim;
    }
    shape.num_tokens = batch * q_len;
    shape.max_kv_len = kv_len;
    host_q_start = qs;
    shape.host_q_start = host_q_start.data();  // prompts (q_len > 1) take the tensor-core kernel
  }
  // K, V (and scales) bytes one attend reads, each cached row once.
  double kv_bytes() const {
    const double rows = double(batch) * kv_len * kNumKvHeads * 2;
    return rows * (kHeadDim * kv_elem_bytes(dtype) + (kv_has_group_scales(dtype) ? 4 : 0));
  }
};

double cublas_tflops() {
  const int M = 4096, N = 4096, K = 128, batch = kNumQHeads;
  Buffer<__half> a(size_t(M) * K * batch), b(size_t(K) * N * batch), c(size_t(M) * N * batch);
  ok(cudaMemset(a.p, 0, size_t(M) * K * batch * 2), "memset");
  ok(cudaMemset(b.p, 0, size_t(K) * N * batch * 2), "memset");
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return 0.0;
  const float alpha = 1.0f, beta = 0.0f;
  const double ms = median_ms(10, [&] {
    cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &alpha, a.p, CUDA_R_16F, M, int64_t(M) * K, b.p,
                               CUDA_R_16F, K, int64_t(K) * N, &beta, c.p, CUDA_R_16F, M, int64_t(M) * N, batch,
                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  });
  cublasDestroy(h);
  return 2.0 * M * N * K * batch / (ms * 1e-3) / 1e12;
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  std::string why;
  if (!cuda::device_available(&why)) {
    std::printf("skipped: %s\n", why.c_str());
    return 77;
  }
  cudaDeviceProp prop;
  ok(cudaGetDeviceProperties(&prop, 0), "properties");
  const double copy = copy_gbps();
  std::printf("device: %s, %d SMs; copy %.0f GB/s (read + written)\n", prop.name, prop.multiProcessorCount, copy);
  std::printf("{\"case\":\"copy\",\"device\":\"%s\",\"gbps\":%.1f}\n", prop.name, copy);

  cuda::Workspace ws;
  const std::vector<KvDType> dtypes = quick ? std::vector<KvDType>{KvDType::F16, KvDType::Int8}
                                            : std::vector<KvDType>{KvDType::F16, KvDType::BF16, KvDType::Int8, KvDType::Fp8E4M3};
  const std::vector<int> kv_lens = quick ? std::vector<int>{8192} : std::vector<int>{8192, 32768};
  const std::vector<int> batches = quick ? std::vector<int>{1, 64} : std::vector<int>{1, 16, 64, 256};
  std::printf("%-10s %6s %6s %10s %9s %7s %9s\n", "dtype", "keys", "batch", "us", "GB/s", "share", "vs f16");
  for (int kv_len : kv_lens)
    for (int batch : batches) {
      double f16_ms = 0.0;
      for (KvDType dtype : dtypes) {
        size_t free_bytes = 0, total = 0;
        ok(cudaMemGetInfo(&free_bytes, &total), "meminfo");
        const double need = double(batch) * kv_len * kNumKvHeads * 2 * kHeadDim * kv_elem_bytes(dtype) * 1.1;
        if (need > 0.8 * double(free_bytes)) {
          std::printf("%-10s %6d %6d   (skipped: %.1f GB of KV does not fit)\n", std::string(kv_dtype_name(dtype)).c_str(),
                      kv_len, batch, need / 1e9);
          continue;
        }
        Step step(batch, kv_len, 1, dtype);
        const double ms = median_ms(20, [&] { cuda::attend(step.p, step.shape, {}, ws, nullptr); });
        ok(cudaGetLastError(), "attend");
        if (dtype == KvDType::F16) f16_ms = ms;
        const double gbps = step.kv_bytes() / (ms * 1e-3) / 1e9;
        const double speedup = f16_ms > 0.0 ? f16_ms / ms : 0.0;
        std::printf("%-10s %6d %6d %10.1f %9.0f %6.0f%% %8.2fx\n", std::string(kv_dtype_name(dtype)).c_str(), kv_len,
                    batch, ms * 1e3, gbps, 100.0 * gbps / copy, speedup);
        std::printf("{\"case\":\"decode\",\"dtype\":\"%s\",\"keys\":%d,\"batch\":%d,\"us\":%.2f,\"gbps\":%.1f,"
                    "\"copy_share\":%.3f,\"vs_f16\":%.3f}\n",
                    std::string(kv_dtype_name(dtype)).c_str(), kv_len, batch, ms * 1e3, gbps, gbps / copy, speedup);
      }
    }

  const double gemm = cublas_tflops();
  std::printf("cuBLAS f16 GEMM 32 x [4096x128]x[128x4096]: %.1f TFLOP/s\n", gemm);
  for (KvDType dtype : {KvDType::F16, KvDType::BF16}) {
    const int S = 4096;
    Step step(1, S, S, dtype);
    const double ms = median_ms(5, [&] { cuda::attend(step.p, step.shape, {}, ws, nullptr); });
    ok(cudaGetLastError(), "attend");
    const double flops = 2.0 * 2.0 * double(S) * S / 2.0 * kHeadDim * kNumQHeads;  // QK and PV, causal half
    const double tflops = flops / (ms * 1e-3) / 1e12;
    std::printf("context %s S=%d causal: %.2f ms, %.1f TFLOP/s = %.1f%% of cuBLAS\n",
                std::string(kv_dtype_name(dtype)).c_str(), S, ms, tflops, gemm > 0 ? 100.0 * tflops / gemm : 0.0);
    std::printf("{\"case\":\"context\",\"dtype\":\"%s\",\"rows\":%d,\"ms\":%.3f,\"tflops\":%.2f,\"cublas_tflops\":%.2f}\n",
                std::string(kv_dtype_name(dtype)).c_str(), S, ms, tflops, gemm);
  }
  return 0;
}

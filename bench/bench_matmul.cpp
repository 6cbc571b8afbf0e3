// matmul throughput for TinyLlama-like shapes, in weight bytes read per second, next to a STREAM
// triad and a read-only sweep that measure what the memory system can deliver. Decode (1 token) should approach the
// triad; batches (8, 32, 64 tokens) turn compute bound and also report FLOP/s, next to fma_peak (the f32
// multiply-add ceiling of the active ISA on all threads). q8_0i, q4_0i, q5_0i, q4_ki, q5_ki, q6_ki, f16i,
// bf16i: interleaved as the engine lays them out (kernels::interleave_rows: AVX-512 VNNI for the integer
// types, AVX2 for Q8_0, F16 / BF16), where interleaving pays on this CPU.
//
//   ./bench_matmul                                   # active ISA = best detected, all threads
//   INFLIGHT_ISA=avx2 ./bench_matmul --benchmark_filter='t1$'
//   INFLIGHT_PREFILL_HALF_TILES=1 ./bench_matmul --benchmark_filter='f16i/.*/t512'  # AVX-512 prefill tiling
//
// INFLIGHT_PREFILL_HALF_TILES=1 (or 0) picks the AVX-512 F16 / BF16 interleaved prefill's 16 x 24 half tiles (or
// its 32 x 12 tiles) whatever the CPU's vendor (kernels::cpu::prefill_half_tiles), to compare the two on one host.
//
// Weights are cycled over enough copies to exceed the last-level cache, so every case reads them from DRAM,
// as a real model does at every step: its layers do not fit in cache. The matmul_hot/ cases (one token)
// read one copy over and over, from the caches: next to the same matmul/ case they tell a kernel that is
// compute-bound at decode from one that waits for memory.
#include <benchmark/benchmark.h>

#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/isa.h"
#include "kernels/dtype.h"
#include "kernels/matmul.h"
#include "kernels/thread_pool.h"

namespace {

using namespace inflight::kernels;

constexpr int64_t kColdBytes = int64_t(256) << 20;  // total weight footprint cycled over, >> LLC

// A row-major [rows, cols] matrix of `dtype` with values in about [-1, 1].
std::vector<uint8_t> make_matrix(DType dtype, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<uint8_t> bytes(size_t(rows * row_bytes(dtype, cols)));
  const int64_t n = rows * cols;
  switch (dtype) {
    case DType::F32: {
      auto* p = reinterpret_cast<float*>(bytes.data());
      for (int64_t i = 0; i < n; ++i) p[i] = dist(rng);
      break;
    }
    case DType::F16:
    case DType::BF16: {
      auto* p = reinterpret_cast<uint16_t*>(bytes.data());
      for (int64_t i = 0; i < n; ++i) p[i] = dtype == DType::F16 ? f32_to_f16(dist(rng)) : f32_to_bf16(dist(rng));
      break;
    }
    case DType::Q8_0: {
      for (int64_t b = 0; b < n / kQ8BlockSize; ++b) {
        uint8_t* block = bytes.data() + b * kQ8BlockBytes;
        const uint16_t d = f32_to_f16(1.0f / 127.0f);
        std::memcpy(block, &d, 2);
        for (int i = 0; i < kQ8BlockSize; ++i) block[2 + i] = uint8_t(int8_t(int(rng() % 255) - 127));
      }
      break;
    }
    default: {  // Q4_0 .. Q6_K: random rows through the quantiser
      std::vector<float> row(static_cast<size_t>(cols));
      for (int64_t r = 0; r < rows; ++r) {
        for (float& f : row) f = dist(rng);
        quantize_row(dtype, row.data(), bytes.data() + r * row_bytes(dtype, cols), cols);
      }
      break;
    }
  }
  return bytes;
}

// interleaved: the rows interleaved as the engine lays them out (AVX-512 VNNI for the integer types, AVX2 for
// Q8_0, F16 / BF16).
// hot: one copy, read from the caches.
void run_matmul(benchmark::State& state, DType dtype, bool interleaved, int64_t rows, int64_t cols, int64_t num_tokens,
                bool hot) {
  const int64_t matrix_bytes = rows * row_bytes(dtype, cols);
  const int64_t num_copies = hot ? 1 : (kColdBytes + matrix_bytes - 1) / matrix_bytes;
  std::vector<std::vector<uint8_t>> copies;
  for (int64_t i = 0; i < num_copies; ++i) {
    copies.push_back(make_matrix(dtype, rows, cols, uint32_t(i + 1)));
    if (interleaved) {
      std::vector<uint8_t> plain = copies.back();
      interleave_rows({dtype, plain.data(), rows, cols}, copies.back().data());
    }
  }
  std::vector<float> x(size_t(num_tokens * cols), 0.5f);  // [num_tokens, cols]
  std::vector<float> y(size_t(num_tokens * rows));        // [num_tokens, rows]
  int64_t next = 0;
  for (auto _ : state) {
    const WeightMatrix w{dtype, copies[size_t(next)].data(), rows, cols, interleaved};
    matmul(w, x.data(), y.data(), num_tokens);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
    next = next + 1 == num_copies ? 0 : next + 1;
  }
  state.SetBytesProcessed(state.iterations() * matrix_bytes);
  state.counters["FLOP/s"] = benchmark::Counter(double(2 * rows * cols * num_tokens),
                                                benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(cpu::isa_name(cpu::active_isa())) + ", " +
                 std::to_string(compute_pool().num_threads()) + " threads");
}

// STREAM triad a[i] = b[i] + s * c[i] over 3 x 128 MiB, split over the compute pool like matmul.
// Bytes counted as STREAM does: 3 arrays per pass (no write-allocate traffic).
void run_triad(benchmark::State& state) {
  const int64_t n = int64_t(32) << 20;  // floats per array
  std::vector<float> a(static_cast<size_t>(n)), b(a.size(), 1.0f), c(a.size(), 2.0f);
  const float s = 3.0f;
  for (auto _ : state) {
    compute_pool().parallel_for(n, int64_t(1) << 16, [&](int64_t begin, int64_t end) {
      float* pa = a.data();
      const float* pb = b.data();
      const float* pc = c.data();
      for (int64_t i = begin; i < end; ++i) pa[i] = pb[i] + s * pc[i];
    });
    benchmark::DoNotOptimize(a.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 3 * n * int64_t(sizeof(float)));
  state.SetLabel(std::to_string(compute_pool().num_threads()) + " threads");
}

// Read-only bandwidth: sum of one 384 MiB array, the access pattern of a GEMV (weights read once,
// nothing written), with the widest loads of the active ISA, as the decode kernels read. Narrow loads
// understate the memory system: on the Intel host in bench/RESULTS.md, 16-byte loads read 15-18 GB/s
// where 64-byte loads read 24-26 (the load buffer, not DRAM, bounds the lines in flight).
// huge_pages: the buffer on 2 MiB pages where the kernel allows it, as the model's weights are
// (engine/mapped_file.cpp); else on 4 KiB pages.
__attribute__((target("avx512f"))) float sum_avx512(const float* p, int64_t n) {  // n: a multiple of 64
  __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  for (int64_t i = 0; i < n; i += 64) {
    s0 = _mm512_add_ps(s0, _mm512_loadu_ps(p + i));
    s1 = _mm512_add_ps(s1, _mm512_loadu_ps(p + i + 16));
    s2 = _mm512_add_ps(s2, _mm512_loadu_ps(p + i + 32));
    s3 = _mm512_add_ps(s3, _mm512_loadu_ps(p + i + 48));
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, _mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
  return lanes[0];
}

__attribute__((target("avx2"))) float sum_avx2(const float* p, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  for (int64_t i = 0; i < n; i += 32) {
    s0 = _mm256_add_ps(s0, _mm256_loadu_ps(p + i));
    s1 = _mm256_add_ps(s1, _mm256_loadu_ps(p + i + 8));
    s2 = _mm256_add_ps(s2, _mm256_loadu_ps(p + i + 16));
    s3 = _mm256_add_ps(s3, _mm256_loadu_ps(p + i + 24));
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  return lanes[0];
}

float sum_sse(const float* p, int64_t n) {
  typedef float Vec4 __attribute__((vector_size(16)));
  Vec4 s0 = {}, s1 = {}, s2 = {}, s3 = {};
  for (int64_t i = 0; i < n; i += 16) {
    Vec4 v[4];
    std::memcpy(v, p + i, sizeof(v));
    s0 += v[0];
    s1 += v[1];
    s2 += v[2];
    s3 += v[3];
  }
  const Vec4 total = (s0 + s1) + (s2 + s3);
  return total[0];
}

void run_read(benchmark::State& state, bool huge_pages) {
  constexpr size_t kHuge = size_t(2) << 20;
  const int64_t n = int64_t(96) << 20;  // floats, 384 MiB: a multiple of kHuge
  std::unique_ptr<float, decltype(&std::free)> buffer(
      static_cast<float*>(huge_pages ? std::aligned_alloc(kHuge, size_t(n) * 4) : std::malloc(size_t(n) * 4)), &std::free);
  if (!buffer) {
    state.SkipWithError("cannot allocate the buffer");
    return;
  }
  if (huge_pages) madvise(buffer.get(), size_t(n) * 4, MADV_HUGEPAGE);
  float* const data = buffer.get();
  std::fill(data, data + n, 1.0f);
  const cpu::Isa isa = cpu::active_isa();
  float (*const sum)(const float*, int64_t) =
      isa >= cpu::Isa::Avx512 ? sum_avx512 : isa >= cpu::Isa::Avx2 ? sum_avx2 : sum_sse;
  constexpr int64_t kChunk = 64;  // floats per parallel_for unit
  for (auto _ : state) {
    compute_pool().parallel_for(n / kChunk, int64_t(1) << 10, [&](int64_t begin, int64_t end) {
      benchmark::DoNotOptimize(sum(data + begin * kChunk, (end - begin) * kChunk));
    });
  }
  state.SetBytesProcessed(state.iterations() * n * int64_t(sizeof(float)));
  state.SetLabel(std::string(cpu::isa_name(isa)) + ", " + std::to_string(compute_pool().num_threads()) + " threads");
}

// Cost of one compute_pool().run() of num_threads empty tasks, back to back (workers spinning): the
// floor under every parallel kernel call of a decode step.
void run_pool_overhead(benchmark::State& state) {
  ThreadPool& pool = compute_pool();
  std::atomic<int64_t> sink{0};
  const std::function<void(int64_t)> task = [&](int64_t i) { sink.fetch_add(i, std::memory_order_relaxed); };
  for (auto _ : state) pool.run(pool.num_threads(), task);
  benchmark::DoNotOptimize(sink.load());
  state.SetLabel(std::to_string(pool.num_threads()) + " threads");
}

// The f32 multiply-add peak: on every pool thread, 12 independent chains of full-width FMAs (AVX-512: 16
// lanes, AVX2: 8), 2 FLOP per lane -- the ceiling of a float matmul's FMAs on this CPU, which the
// compute-bound cases' FLOP/s are a share of. Per ISA through target attributes, so the binary still runs
// on AVX2-only machines.
constexpr int kFmaChains = 12;

__attribute__((target("avx512f"))) float fma_chains_avx512(int64_t n) {
  __m512 acc[kFmaChains];
  for (int i = 0; i < kFmaChains; ++i) acc[i] = _mm512_set1_ps(1.0f + 1e-3f * float(i));
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t k = 0; k < n; ++k) {
#pragma GCC unroll 12
    for (int i = 0; i < kFmaChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  }
  alignas(64) float lanes[16];
  float sum = 0.0f;
  for (int i = 0; i < kFmaChains; ++i) {
    _mm512_store_ps(lanes, acc[i]);
    for (float l : lanes) sum += l;
  }
  return sum;
}

__attribute__((target("avx2,fma"))) float fma_chains_avx2(int64_t n) {
  __m256 acc[kFmaChains];
  for (int i = 0; i < kFmaChains; ++i) acc[i] = _mm256_set1_ps(1.0f + 1e-3f * float(i));
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t k = 0; k < n; ++k) {
#pragma GCC unroll 12
    for (int i = 0; i < kFmaChains; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  alignas(32) float lanes[8];
  float sum = 0.0f;
  for (int i = 0; i < kFmaChains; ++i) {
    _mm256_store_ps(lanes, acc[i]);
    for (float l : lanes) sum += l;
  }
  return sum;
}

void run_fma_peak(benchmark::State& state) {
  const bool avx512 = cpu::active_isa() >= cpu::Isa::Avx512;
  if (!avx512 && cpu::active_isa() < cpu::Isa::Avx2) {
    state.SkipWithError("needs AVX2 with FMA");
    return;
  }
  const int64_t n = int64_t(1) << 22;  // chain steps per thread and iteration
  ThreadPool& pool = compute_pool();
  std::atomic<int> sink{0};
  double best_seconds = 1e30;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.run(pool.num_threads(), [&](int64_t) {
      const float v = avx512 ? fma_chains_avx512(n) : fma_chains_avx2(n);
      sink.fetch_add(v > 0.0f ? 1 : 0, std::memory_order_relaxed);
    });
    best_seconds = std::min(best_seconds, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  benchmark::DoNotOptimize(sink.load());
  const int lanes = avx512 ? 16 : 8;
  const double flops = double(2 * lanes * kFmaChains * n * pool.num_threads());
  state.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  // The fastest iteration: what the cores can do. The mean drifts down whenever the host takes a core from one
  // thread for a while (each iteration waits for the slower thread); the share of the peak a run reaches is
  // quoted against this, the conservative figure.
  state.counters["best_FLOP/s"] = flops / best_seconds;
  state.SetLabel(std::string(cpu::isa_name(cpu::active_isa())) + ", " + std::to_string(pool.num_threads()) + " threads");
}

struct Shape {
  int64_t rows, cols;
};

bool register_all() {
  benchmark::RegisterBenchmark("triad", run_triad)->UseRealTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("read/4k_pages", run_read, false)->UseRealTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("read/huge_pages", run_read, true)->UseRealTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("fma_peak", run_fma_peak)->UseRealTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("pool_run", run_pool_overhead)->UseRealTime()->Unit(benchmark::kNanosecond);
  // TinyLlama's and SmolLM's (q, gate + up, down) shapes.
  const Shape shapes[] = {{2048, 2048}, {5632, 2048}, {2048, 5632}, {576, 576}, {3072, 576}, {576, 1536}};
  for (DType dtype : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                      DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    for (bool interleaved : {false, true}) {
    for (const Shape& s : shapes) {
      if (s.cols % block_size(dtype) != 0 || (interleaved && !interleaving_pays({dtype, nullptr, s.rows, s.cols}))) continue;
      for (int64_t num_tokens : {1, 8, 32, 64, 512}) {
        const std::string name = "matmul/" + std::string(dtype_name(dtype)) + (interleaved ? "i/" : "/") +
                                 std::to_string(s.rows) + "x" + std::to_string(s.cols) + "/t" + std::to_string(num_tokens);
        benchmark::RegisterBenchmark(name.c_str(), run_matmul, dtype, interleaved, s.rows, s.cols, num_tokens, false)
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond);
      }
      const std::string hot = "matmul_hot/" + std::string(dtype_name(dtype)) + (interleaved ? "i/" : "/") +
                              std::to_string(s.rows) + "x" + std::to_string(s.cols) + "/t1";
      benchmark::RegisterBenchmark(hot.c_str(), run_matmul, dtype, interleaved, s.rows, s.cols, 1, true)
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
    }
    }
  }
  return true;
}

const bool registered = register_all();

}  // namespace

int main(int argc, char** argv) {
  if (const char* half = std::getenv("INFLIGHT_PREFILL_HALF_TILES"); half != nullptr && *half != '\0')
    inflight::kernels::cpu::set_prefill_half_tiles(std::strcmp(half, "0") != 0);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

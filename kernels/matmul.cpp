#include "kernels/matmul.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/matmul_kernels.h"
#include "kernels/thread_pool.h"

namespace inflight::kernels {
namespace {

// Rows handed out together; matches the SIMD row block so chunks never split one.
constexpr int64_t kRowBlock = 8;
// Least multiply-adds per pool task: below this a task costs less than waking a thread
// (64x64 with one token is one task; 2048x2048 with one token is 8 tasks of 512 rows on 2 threads).
constexpr int64_t kMinMacsPerTask = int64_t(1) << 15;

using RowsFn = void (*)(const cpu::MatmulArgs&, int64_t, int64_t);

RowsFn rows_fn(cpu::Isa isa) {
  switch (isa) {
    case cpu::Isa::Avx512: return cpu::matmul_rows_avx512;
    case cpu::Isa::Avx2: return cpu::matmul_rows_avx2;
    case cpu::Isa::Scalar: break;
  }
  return cpu::matmul_rows_scalar;
}

}  // namespace

void matmul(const WeightMatrix& w, const float* x, float* y, int64_t num_tokens) {
  if (num_tokens <= 0 || w.rows <= 0) return;
  if (w.dtype == DType::Q8_0 && w.cols % kQ8BlockSize != 0) {
    std::fprintf(stderr, "%s:%d: Q8_0 matmul needs cols %% 32 == 0, got %lld\n", __FILE__, __LINE__,
                 static_cast<long long>(w.cols));
    std::abort();
  }
  cpu::MatmulArgs a;
  a.dtype = w.dtype;
  a.w = static_cast<const uint8_t*>(w.data);
  a.w_row_bytes = row_bytes(w.dtype, w.cols);
  a.cols = w.cols;
  a.rows = w.rows;
  a.x = x;
  a.y = y;
  a.num_tokens = num_tokens;
  const RowsFn fn = rows_fn(cpu::active_isa());

  const int64_t num_blocks = (w.rows + kRowBlock - 1) / kRowBlock;
  const int64_t macs_per_block = kRowBlock * std::max<int64_t>(1, w.cols) * num_tokens;
  const int64_t grain = std::max<int64_t>(1, kMinMacsPerTask / macs_per_block);
  compute_pool().parallel_for(num_blocks, grain, [&](int64_t begin, int64_t end) {
    fn(a, begin * kRowBlock, std::min(w.rows, end * kRowBlock));
  });
}

}  // namespace inflight::kernels

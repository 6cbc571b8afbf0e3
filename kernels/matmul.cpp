#include "kernels/matmul.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/matmul_kernels.h"
#include "kernels/thread_pool.h"

namespace inflight::kernels {
namespace cpu {

namespace {

// One block of kLen activations: d = amax / 127, q = x * (1 / d) rounded to nearest even.
template <int kLen>
void quantize_block(const float* xb, int8_t* qb, float* d) {
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: (v + kRound) - kRound rounds v to nearest even
  // max |x| via the bit patterns (non-negative floats order like their bits): vectorises at -O3
  uint32_t amax_bits = 0;
  for (int i = 0; i < kLen; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &xb[i], 4);
    bits &= 0x7fffffffu;
    amax_bits = bits > amax_bits ? bits : amax_bits;
  }
  float amax;
  std::memcpy(&amax, &amax_bits, 4);
  const float scale = amax / 127.0f;
  const float inv = scale != 0.0f ? 1.0f / scale : 0.0f;
  *d = scale;
  for (int i = 0; i < kLen; ++i) {
    const float v = xb[i] * inv;  // |v| <= 127 (+ rounding), far below 2^22
    qb[i] = int8_t(int32_t((v + kRound) - kRound));
  }
}


}  // namespace

void quantize_activations_q8_0(const float* x, int64_t n, int8_t* q, float* d) {
  for (int64_t b = 0; b < n / kQ8BlockSize; ++b)
    quantize_block<kQ8BlockSize>(x + b * kQ8BlockSize, q + b * kQ8BlockSize, d + b);
}

namespace {

constexpr float kRoundEven = 12582912.0f;  // 1.5 * 2^23: (v + k) - k rounds |v| < 2^22 to nearest even

// llama.cpp's Q8_0 / Q8_1 activation block (x86): d = amax / 127, q = x * (127 / amax) rounded to nearest
// even; d and d * sum(q) (Q8_1's s) kept as f16. The inverse is taken as 127 / amax, not 1 / d: activations that sit exactly on a rounding
// midpoint (quantised embeddings make many) then round the same way as in llama.cpp.
void quantize_block_32(const float* xb, int8_t* qb, float* d, float* m) {
  float amax = 0.0f;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(xb[i]));
  const float scale = amax / 127.0f;
  const float inv = amax != 0.0f ? 127.0f / amax : 0.0f;
  int32_t sum = 0;
  for (int i = 0; i < 32; ++i) {
    qb[i] = int8_t(int32_t((xb[i] * inv + kRoundEven) - kRoundEven));
    sum += qb[i];
  }
  *d = f16_to_f32(f32_to_f16(scale));
  *m = f16_to_f32(f32_to_f16(scale * float(sum)));
}

// llama.cpp's Q8_K activation block: the element of largest magnitude m (with its sign), iscale = -127 / m,
// q = min(127, round(iscale * x)), d = 1 / iscale (negative where m > 0).
void quantize_block_256(const float* xb, int8_t* qb, float* d) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < 256; ++i) {
    if (std::fabs(xb[i]) > amax) {
      amax = std::fabs(xb[i]);
      max = xb[i];
    }
  }
  if (amax == 0.0f) {
    *d = 0.0f;
    std::memset(qb, 0, 256);
    return;
  }
  const float iscale = -127.0f / max;
  for (int i = 0; i < 256; ++i) qb[i] = int8_t(std::min(127, int32_t((iscale * xb[i] + kRoundEven) - kRoundEven)));
  *d = 1.0f / iscale;
}

}  // namespace

void quantize_activations(const float* x, int64_t n, int block, int8_t* q, float* d, int16_t* s, float* m) {
  for (int64_t b = 0; b < n / block; ++b) {
    if (block == 256) quantize_block_256(x + b * block, q + b * block, d + b);
    else quantize_block_32(x + b * block, q + b * block, d + b, m + b);
  }
  for (int64_t g = 0; s && g < n / 16; ++g) {
    int32_t sum = 0;
    for (int i = 0; i < 16; ++i) sum += q[g * 16 + i];
    s[g] = int16_t(sum);  // |sum| <= 16 * 127
  }
}

}  // namespace cpu

namespace {

// Rows handed out together; matches the SIMD row block so chunks never split one.
constexpr int64_t kRowBlock = 8;
// Least multiply-adds per pool task: below this a task costs less than waking a thread
// (64x64 with one token is one task; 2048x2048 with one token is 8 tasks of 256 rows on 2 threads).
constexpr int64_t kMinMacsPerTask = int64_t(1) << 15;

using RowsFn = void (*)(const cpu::MatmulArgs&, int64_t, int64_t);

RowsFn rows_fn(cpu::Isa isa, DType dtype) {
  switch (isa) {
    case cpu::Isa::Avx512Bf16:
    case cpu::Isa::Avx512Vnni:
      return dtype == DType::Q8_0 || is_kquant(dtype) || is_legacy_quant(dtype) ? cpu::matmul_rows_avx512_vnni
                                                                                 : cpu::matmul_rows_avx512;
    case cpu::Isa::Avx512: return cpu::matmul_rows_avx512;
    case cpu::Isa::Avx2: return cpu::matmul_rows_avx2;
    case cpu::Isa::Scalar: break;
  }
  return cpu::matmul_rows_scalar;
}

[[noreturn]] void fail(const char* file, int line, const char* what, long long value) {
  std::fprintf(stderr, "%s:%d: %s (%lld)\n", file, line, what, value);
  std::abort();
}

// Fills xq [num_tokens, cols], xd [num_tokens, cols / block], and xs [num_tokens, cols / 16] (K-quants) or
// xm [num_tokens, cols / 32] (legacy types) where given, for a quantised matmul; tokens in parallel.
void quantize_tokens(const float* x, int64_t cols, int64_t num_tokens, int block, int8_t* xq, float* xd,
                     int16_t* xs, float* xm) {
  struct Job {
    const float* x;
    int64_t cols;
    int block;
    int8_t* xq;
    float* xd;
    int16_t* xs;
    float* xm;
  } job{x, cols, block, xq, xd, xs, xm};
  // Captures one pointer, so the std::function stores it inline (no allocation per call).
  const auto quantize = [j = &job](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      if (j->xs || j->xm)  // K-quants / legacy types
        cpu::quantize_activations(j->x + t * j->cols, j->cols, j->block, j->xq + t * j->cols,
                                  j->xd + t * (j->cols / j->block), j->xs ? j->xs + t * (j->cols / 16) : nullptr,
                                  j->xm ? j->xm + t * (j->cols / 32) : nullptr);
      else
        cpu::quantize_activations_q8_0(j->x + t * j->cols, j->cols, j->xq + t * j->cols,
                                       j->xd + t * (j->cols / kQ8BlockSize));
    }
  };
  const int64_t grain = std::max<int64_t>(1, kMinMacsPerTask / std::max<int64_t>(1, cols));
  if (num_tokens <= grain) quantize(0, num_tokens);
  else compute_pool().parallel_for(num_tokens, grain, quantize);
}

}  // namespace

void matmul(const WeightMatrix& w, const float* x, float* y, int64_t num_tokens) {
  if (num_tokens <= 0 || w.rows <= 0) return;
  const int block = block_size(w.dtype);  // 1 for float types
  if (w.cols % block != 0) fail(__FILE__, __LINE__, "quantised matmul: cols not a multiple of the block size", w.cols);
  struct Job {
    cpu::MatmulArgs args;
    RowsFn rows_fn;
  } job;
  cpu::MatmulArgs& a = job.args;
  a.dtype = w.dtype;
  a.w = static_cast<const uint8_t*>(w.data);
  a.w_row_bytes = row_bytes(w.dtype, w.cols);
  a.cols = w.cols;
  a.rows = w.rows;
  a.x = x;
  a.y = y;
  a.num_tokens = num_tokens;
  job.rows_fn = rows_fn(cpu::active_isa(), w.dtype);

  if (block > 1) {
    // Per calling thread, reused across calls: [num_tokens, cols] quants, [num_tokens, cols / ablock]
    // scales, [num_tokens, cols / 16] sums (K-quants), [num_tokens, cols / 32] Q8_1 sums (legacy types).
    const int ablock = cpu::activation_block_size(w.dtype);
    const bool sums = is_kquant(w.dtype);
    const bool legacy = is_legacy_quant(w.dtype);
    thread_local std::vector<int8_t> xq;
    thread_local std::vector<float> xd, xm;
    thread_local std::vector<int16_t> xs;
    xq.resize(size_t(num_tokens * w.cols));
    xd.resize(size_t(num_tokens * (w.cols / ablock)));
    if (sums) xs.resize(size_t(num_tokens * (w.cols / 16)));
    if (legacy) xm.resize(size_t(num_tokens * (w.cols / 32)));
    quantize_tokens(x, w.cols, num_tokens, ablock, xq.data(), xd.data(), sums ? xs.data() : nullptr,
                    legacy ? xm.data() : nullptr);
    a.xq = xq.data();
    a.xd = xd.data();
    a.xs = sums ? xs.data() : nullptr;
    a.xm = legacy ? xm.data() : nullptr;
  }

  const int64_t num_blocks = (w.rows + kRowBlock - 1) / kRowBlock;
  const int64_t macs_per_block = kRowBlock * std::max<int64_t>(1, w.cols) * num_tokens;
  const int64_t grain = std::max<int64_t>(1, kMinMacsPerTask / macs_per_block);
  if (grain >= num_blocks) {  // one task: skip the pool
    job.rows_fn(a, 0, w.rows);
    return;
  }
  compute_pool().parallel_for(num_blocks, grain, [j = &job](int64_t begin, int64_t end) {  // one pointer
    j->rows_fn(j->args, begin * kRowBlock, std::min(j->args.rows, end * kRowBlock));
  });
}

}  // namespace inflight::kernels

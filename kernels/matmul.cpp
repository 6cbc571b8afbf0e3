#include "kernels/matmul.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/matmul_kernels.h"
#include "kernels/cpu/matmul_kquant_interleave.h"
#include "kernels/cpu/matmul_legacy_interleave.h"
#include "kernels/huge_pages.h"
#include "kernels/thread_pool.h"

namespace inflight::kernels {
namespace cpu {

namespace {

constexpr float kRoundEven = 12582912.0f;  // 1.5 * 2^23: (v + k) - k rounds |v| < 2^22 to nearest even

// llama.cpp's Q8_0 / Q8_1 activation block (x86): d = amax / 127, q = x * (127 / amax) rounded to nearest
// even; d and d * sum(q) (Q8_1's s) kept as f16. The inverse is taken as 127 / amax, not 1 / d: activations that sit exactly on a rounding
// midpoint (quantised embeddings make many) then round the same way as in llama.cpp. Returns sum(q).
int32_t quantize_block_32(const float* xb, int8_t* qb, float* d, float* m) {
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
  return sum;
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

void quantize_activations(const float* x, int64_t n, int block, int8_t* q, float* d, int16_t* s, float* m,
                          int32_t* o, int32_t* c) {
  if (active_isa() >= Isa::Avx512) quantize_activations_avx512(x, n, block, q, d, s, m, o, c);
  else if (active_isa() == Isa::Avx2) quantize_activations_avx2(x, n, block, q, d, s, m, o, c);
  else quantize_activations_scalar(x, n, block, q, d, s, m, o, c);
}

void quantize_activations_scalar(const float* x, int64_t n, int block, int8_t* q, float* d, int16_t* s, float* m,
                                 int32_t* o, int32_t* c) {
  for (int64_t b = 0; b < n / block; ++b) {
    if (block == 256) {
      quantize_block_256(x + b * block, q + b * block, d + b);
    } else {
      const int32_t sum = quantize_block_32(x + b * block, q + b * block, d + b, m + b);
      if (c) c[b] = -128 * sum;
    }
  }
  for (int64_t g = 0; o && block == 32 && g < n / 4; ++g) o[g] = -16 * (q[4 * g] + q[4 * g + 1] + q[4 * g + 2] + q[4 * g + 3]);
  for (int64_t g = 0; s && g < n / 16; ++g) {
    int32_t sum = 0;
    for (int i = 0; i < 16; ++i) sum += q[g * 16 + i];
    s[g] = int16_t(sum);  // |sum| <= 16 * 127
  }
}

void pack_token_tile_scalar(const float* x, int64_t cols, int64_t n, float* out) {
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < cols; ++c) out[c * n + t] = x[t * cols + c];
}

}  // namespace cpu

namespace {

// Rows handed out together: a multiple of the SIMD row block (8) and of an interleaved group (16 for
// Q8_0, 32 for F16 / BF16), so chunks never split one.
constexpr int64_t kRowBlock = 32;
// Least multiply-adds per pool task: below this a task costs less than waking a thread
// (64x64 with one token is one task; 2048x2048 with one token is one band of 1024 rows per thread).
constexpr int64_t kMinMacsPerTask = int64_t(1) << 15;
// Matrices in one matmul() group (Q, K, V).
constexpr size_t kMaxTargets = 4;
// Tokens up to which the SIMD kernels may run plain Q4_0 .. Q5_1 straight from their blocks (their token
// tile, matmul_tiling.h), and need MatmulArgs::xo; above it they unpack rows. Interleaved Q4_0 / Q5_0 run
// from their blocks, with xo, at any number of tokens.
constexpr int64_t kMaxDirectTokens = 4;
// Tasks per pool thread. At a few tokens (the weight stream is the cost): one contiguous band of rows
// each, which each thread streams in one run that the hardware prefetchers follow; finer tasks interleave
// the threads' rows and restart the streams (SmolLM Q4_K_M decode, 2 threads, medians of 7 alternating:
// 1 task 234 tok/s, 2: 226, 4: 215, 16: 168; TinyLlama 1 task 46.2, 4: 41.7). With more tokens the
// work is compute-bound: 4 tasks per thread even out the threads (prefill 740 tok/s against 705 with 1).
// At a few tokens the threads still even out, by taking blocks from the back of each other's bands
// (run_bands).
constexpr int64_t kStreamTasksPerThread = 1;
constexpr int64_t kComputeTasksPerThread = 4;
// Tokens per task where a matmul has at least twice as many (a prefill) and its matrices are interleaved
// F16 / BF16 or K-quants: tasks then split the tokens as well as the rows, so a small matrix still shares
// out evenly (SmolLM's 576-row matrices are 18 row blocks: 8 row tasks of 2 or 3 blocks left one thread a
// block or two behind the other). bench_matmul at 512 tokens, 2 threads, medians of 5 alternating runs:
// f16 interleaved 576x576, 576x1536 and 2048x2048 1.07-1.09x faster, 3072x576 level; Q4_K / Q6_K 576x1536
// 1.12-1.14x, 2048x2048 0.98-1.07x. Q8_0 and Q4_0 .. Q5_1 stay whole: each task unpacks or reads its row
// blocks once for all its tokens, and slices lost up to 13 % there (Q8_0 576x576, Q5_0 576x1536).
// A multiple of the kernels' token tiles (kHalfTokenTile, and 4), so every slice starts a tile; the last
// slice takes the remainder.
constexpr int64_t kTokenSlice = 48;
static_assert(kTokenSlice % cpu::kHalfTokenTile == 0 && kTokenSlice % 4 == 0);

using RowsFn = void (*)(const cpu::MatmulArgs&, int64_t, int64_t);

// Whether a batch of more than one token reaches the interleaved F16 / BF16 kernels packed in token tiles
// (MatmulArgs::xt). AMD's AVX-512 tiling (32 x 12, not the half tiles) and the AVX2 kernel broadcast each
// token straight from its row of x as cheaply, which saves the packing pass and its reads of x (Zen 5, f16
// prefill, alternating rounds: SmolLM 1.04x over 6 rounds, TinyLlama 1.03x over 4; under INFLIGHT_ISA=avx2
// SmolLM 1.03x over 7). Rows a multiple of 4 KiB apart stay packed: a tile's rows then share one L1 set
// (TinyLlama's 2048 columns read from rows: 0.97-0.98x).
bool packs_tokens(int64_t cols) {
  const cpu::Isa isa = cpu::active_isa();
  return isa < cpu::Isa::Avx2 || (isa >= cpu::Isa::Avx512 && cpu::prefill_half_tiles()) || cols % 1024 == 0;
}

// The 32-weight formats with a 16-row interleaved layout (matmul_legacy_interleave.h).
bool is_legacy_interleavable(DType dtype) { return dtype == DType::Q4_0 || dtype == DType::Q5_0; }
// The formats interleaved block by block, 16 rows' blocks of one column range rearranged in their own bytes
// (the K-quants: matmul_kquant_interleave.h).
bool is_block_interleavable(DType dtype) { return is_legacy_interleavable(dtype) || is_kquant(dtype); }
// The types whose interleaved layout the AVX-512 VNNI kernels read (the integer ones).
bool is_int8_interleavable(DType dtype) { return dtype == DType::Q8_0 || is_block_interleavable(dtype); }
// The least ISA whose kernels read a type's interleaved layout: AVX2 for Q8_0 and F16 / BF16, AVX-512 VNNI
// for the other integer types.
cpu::Isa interleaved_isa(DType dtype) {
  return is_int8_interleavable(dtype) && dtype != DType::Q8_0 ? cpu::Isa::Avx512Vnni : cpu::Isa::Avx2;
}

// Row i's plain block from a group-block of a block-interleaved type, and the group-block from its 16 rows'
// plain blocks.
void block_from_group(DType dtype, const uint8_t* g, int i, uint8_t* out) {
  if (is_kquant(dtype)) cpu::kquant_block_from_group(dtype, g, i, out);
  else cpu::legacy_block_from_group(g, dtype == DType::Q5_0, i, out);
}
void group_from_blocks(DType dtype, const uint8_t* const blocks[cpu::kLegacyGroupRows], uint8_t* g) {
  static_assert(cpu::kKQuantGroupRows == cpu::kLegacyGroupRows);
  if (is_kquant(dtype)) cpu::kquant_group_from_blocks(dtype, blocks, g);
  else cpu::legacy_group_from_blocks(blocks, dtype == DType::Q5_0, g);
}

RowsFn rows_fn(cpu::Isa isa, DType dtype, bool interleaved) {
  if (interleaved && is_int8_interleavable(dtype)) {
    if (isa >= cpu::Isa::Avx512Vnni) return cpu::matmul_rows_avx512_vnni;
    return isa >= interleaved_isa(dtype) ? cpu::matmul_rows_avx2 : cpu::matmul_rows_scalar;  // Q8_0
  }
  if (interleaved)
    return isa >= cpu::Isa::Avx512 ? cpu::matmul_rows_avx512 : isa == cpu::Isa::Avx2 ? cpu::matmul_rows_avx2 : cpu::matmul_rows_scalar;
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

// Rows per interleaved group of a dtype, 0 where it has no interleaved layout.
int64_t interleaved_group(DType dtype) {
  if (dtype == DType::Q8_0) return kInterleavedRows;
  if (is_legacy_interleavable(dtype)) return cpu::kLegacyGroupRows;
  if (is_kquant(dtype)) return cpu::kKQuantGroupRows;
  return dtype == DType::F16 || dtype == DType::BF16 ? kHalfInterleavedRows : 0;
}

[[noreturn]] void fail(const char* file, int line, const char* what, long long value) {
  std::fprintf(stderr, "%s:%d: %s (%lld)\n", file, line, what, value);
  std::abort();
}

// Fills xq [num_tokens, cols], xd [num_tokens, cols / block], and xs [num_tokens, cols / 16] (block 256) or
// xm [num_tokens, cols / 32] and, if given, xo [num_tokens, cols / 4] (block 32), for a quantised matmul;
// tokens in parallel.
void quantize_tokens(const float* x, int64_t cols, int64_t num_tokens, int block, int8_t* xq, float* xd,
                     int16_t* xs, float* xm, int32_t* xo, int32_t* xc) {
  struct Job {
    const float* x;
    int64_t cols;
    int block;
    int8_t* xq;
    float* xd;
    int16_t* xs;
    float* xm;
    int32_t* xo;
    int32_t* xc;
  } job{x, cols, block, xq, xd, xs, xm, xo, xc};
  // Captures one pointer, so the std::function stores it inline (no allocation per call).
  const auto quantize = [j = &job](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      cpu::quantize_activations(j->x + t * j->cols, j->cols, j->block, j->xq + t * j->cols,
                                j->xd + t * (j->cols / j->block), j->xs ? j->xs + t * (j->cols / 16) : nullptr,
                                j->xm ? j->xm + t * (j->cols / 32) : nullptr,
                                j->xo ? j->xo + t * (j->cols / 4) : nullptr,
                                j->xc ? j->xc + t * (j->cols / 32) : nullptr);
    }
  };
  const int64_t grain = std::max<int64_t>(1, kMinMacsPerTask / std::max<int64_t>(1, cols));
  if (num_tokens <= grain) quantize(0, num_tokens);
  else compute_pool().parallel_for(num_tokens, grain, quantize);
}

// x [num_tokens, cols] -> MatmulArgs::xt: per tile of kHalfTokenTile tokens, [cols, n]; tiles in parallel.
void pack_token_tiles(const float* x, int64_t cols, int64_t num_tokens, float* xt) {
  const int64_t num_tiles = (num_tokens + cpu::kHalfTokenTile - 1) / cpu::kHalfTokenTile;
  struct Job {
    const float* x;
    int64_t cols, num_tokens;
    float* xt;
  } job{x, cols, num_tokens, xt};
  const auto pack = [j = &job](int64_t begin, int64_t end) {  // one pointer: stored inline
    for (int64_t k = begin; k < end; ++k) {
      const int64_t t0 = k * cpu::kHalfTokenTile, n = std::min(cpu::kHalfTokenTile, j->num_tokens - t0);
      const cpu::Isa isa = cpu::active_isa();
      (isa >= cpu::Isa::Avx512 ? cpu::pack_token_tile_avx512
       : isa == cpu::Isa::Avx2 ? cpu::pack_token_tile_avx2
                               : cpu::pack_token_tile_scalar)(j->x + t0 * j->cols, j->cols, n, j->xt + t0 * j->cols);
    }
  };
  const int64_t grain = std::max<int64_t>(1, kMinMacsPerTask / std::max<int64_t>(1, cols * cpu::kHalfTokenTile));
  if (num_tiles <= grain) pack(0, num_tiles);
  else compute_pool().parallel_for(num_tiles, grain, pack);
}

// Tokens [t0, t0 + n) of a: every per-token operand advanced by t0 rows.
cpu::MatmulArgs token_slice(const cpu::MatmulArgs& a, int64_t t0, int64_t n) {
  cpu::MatmulArgs s = a;
  const int64_t cols = a.cols;
  s.num_tokens = n;
  s.x = a.x + t0 * cols;
  s.y = a.y + t0 * a.rows;
  if (a.xt != nullptr) s.xt = a.xt + t0 * cols;  // t0 is a multiple of kHalfTokenTile: a tile's start
  if (a.xq != nullptr) s.xq = a.xq + t0 * cols;
  if (a.xd != nullptr) s.xd = a.xd + t0 * (cols / cpu::activation_block_size(a.dtype));
  if (a.xs != nullptr) s.xs = a.xs + t0 * (cols / 16);
  if (a.xm != nullptr) s.xm = a.xm + t0 * (cols / 32);
  if (a.xo != nullptr) s.xo = a.xo + t0 * (cols / 4);
  if (a.xc != nullptr) s.xc = a.xc + t0 * (cols / 32);
  return s;
}

// One matmul() group: the row blocks of its matrices numbered one after another.
struct GroupJob {
  cpu::MatmulArgs args[kMaxTargets];
  RowsFn rows_fn[kMaxTargets];
  int64_t first_block[kMaxTargets + 1];  // row blocks of matrix i: [first_block[i], first_block[i + 1])
  size_t num_targets = 0;

  // Row blocks [begin, end) for tokens [t0, t0 + n) (all tokens: t0 = 0, n = num_tokens).
  void run(int64_t begin, int64_t end, int64_t t0, int64_t n) const {
    for (size_t i = 0; i < num_targets && begin < end; ++i) {
      const int64_t b0 = std::max(begin, first_block[i]), b1 = std::min(end, first_block[i + 1]);
      if (b0 >= b1) continue;
      const cpu::MatmulArgs& a = args[i];
      rows_fn[i](t0 == 0 && n == a.num_tokens ? a : token_slice(a, t0, n), (b0 - first_block[i]) * kRowBlock,
                 std::min(a.rows, (b1 - first_block[i]) * kRowBlock));
    }
  }
};

// At a few tokens: one contiguous band of row blocks per task, which its thread streams front to back,
// kClaimBlocks at a time; a thread done with its own band takes kClaimBlocks at a time from the back of
// the others', so no thread waits for a slower one (the bands' owners keep their streams whole until
// the end). Each row block is claimed exactly once, and every row is computed the same way whichever
// thread runs it: the result does not depend on who took what.
// Bands live on the caller's stack, a cache line each (16 KiB, of which a call touches its bands' lines):
// more threads than this leave the rest idle.
constexpr int64_t kMaxBands = 256;
constexpr uint32_t kClaimBlocks = 2;

void run_bands(ThreadPool& pool, const GroupJob& job, int64_t num_blocks, int64_t num_bands, int64_t num_tokens) {
  struct alignas(64) Band {
    uint64_t range;  // {back:32, front:32}: the blocks [front, back) not yet claimed (std::atomic_ref)
  };
  struct Bands {
    const GroupJob* job;
    int64_t num_bands, num_tokens;
    Band band[kMaxBands];
  } bands;
  bands.job = &job;
  bands.num_bands = num_bands;
  bands.num_tokens = num_tokens;
  for (int64_t i = 0; i < num_bands; ++i) {
    const uint64_t front = uint64_t(i * num_blocks / num_bands), back = uint64_t((i + 1) * num_blocks / num_bands);
    bands.band[i].range = back << 32 | front;  // published to the workers by pool.run
  }
  pool.run(num_bands, [b = &bands](int64_t own) {  // one pointer
    const auto claim = [b](int64_t i, bool from_front) {
      std::atomic_ref<uint64_t> range(b->band[i].range);
      uint64_t cur = range.load(std::memory_order_relaxed);
      for (;;) {
        const uint32_t front = uint32_t(cur), back = uint32_t(cur >> 32);
        if (front >= back) return false;
        const uint32_t take = std::min(kClaimBlocks, back - front);
        const uint64_t next = from_front ? uint64_t(back) << 32 | (front + take) : uint64_t(back - take) << 32 | front;
        if (range.compare_exchange_weak(cur, next, std::memory_order_relaxed)) {
          const int64_t first = from_front ? front : back - take;
          b->job->run(first, first + take, 0, b->num_tokens);
          return true;
        }
      }
    };
    while (claim(own, true)) {
    }
    for (int64_t k = 1; k < b->num_bands; ++k)
      while (claim((own + k) % b->num_bands, false)) {
      }
  });
}

}  // namespace

void matmul(std::span<const MatmulTarget> targets, const float* x, int64_t num_tokens) {
  if (num_tokens <= 0 || targets.empty()) return;
  if (targets.size() > kMaxTargets) fail(__FILE__, __LINE__, "matmul: too many matrices in one group", long(targets.size()));
  const int64_t cols = targets[0].w->cols;
  // Activations quantised once per kind the group needs (0: blocks of 32 for Q8_0 .. Q5_1, 1: blocks of 256
  // for the K-quants), per calling thread, reused across calls: [num_tokens, cols] quants, [num_tokens,
  // cols / block] scales, [num_tokens, cols / 32] Q8_1 sums and, for Q4_0 .. Q5_1 run from their blocks,
  // [num_tokens, cols / 4] offset lanes (block 32), [num_tokens, cols / 16] sums (256).
  struct Activations {
    std::vector<int8_t> xq;
    std::vector<float> xd, xm;
    std::vector<int16_t> xs;
    std::vector<int32_t> xo, xc;
  };
  thread_local Activations act[2];
  bool quantized[2] = {};
  // MatmulArgs::xt, where an interleaved F16 / BF16 matrix takes part; on 2 MiB pages (a prefill's first
  // pass would otherwise fault in TinyLlama's 2 MiB a 4 KiB page at a time).
  thread_local struct {
    HugePageMemory memory;
    size_t floats = 0;
  } packed;
  bool is_packed = false;
  // Offset lanes where a 32-weight format other than Q8_0 may run its direct kernel: plain at a few tokens,
  // interleaved at any number.
  const bool offsets = std::any_of(targets.begin(), targets.end(), [num_tokens](const MatmulTarget& g) {
    return is_legacy_quant(g.w->dtype) && (num_tokens <= kMaxDirectTokens || g.w->interleaved);
  });
  // Block sums where an interleaved Q8_0 matrix takes part under AVX-512 VNNI (the AVX2 kernel needs none).
  const bool corrections = cpu::active_isa() >= cpu::Isa::Avx512Vnni &&
                           std::any_of(targets.begin(), targets.end(),
                                       [](const MatmulTarget& g) { return g.w->interleaved && g.w->dtype == DType::Q8_0; });

  GroupJob job;
  job.num_targets = targets.size();
  job.first_block[0] = 0;
  for (size_t i = 0; i < targets.size(); ++i) {
    const WeightMatrix& w = *targets[i].w;
    if (w.cols != cols) fail(__FILE__, __LINE__, "matmul: the matrices of one group differ in cols", w.cols);
    const int block = block_size(w.dtype);  // 1 for float types
    if (w.cols % block != 0) fail(__FILE__, __LINE__, "quantised matmul: cols not a multiple of the block size", w.cols);
    cpu::MatmulArgs& a = job.args[i];
    a.dtype = w.dtype;
    a.w = static_cast<const uint8_t*>(w.data);
    a.w_row_bytes = row_bytes(w.dtype, w.cols);
    a.cols = w.cols;
    a.rows = w.rows;
    a.x = x;
    a.y = targets[i].y;
    a.num_tokens = num_tokens;
    a.interleaved = w.interleaved;
    a.stream_to_l2 = cpu::stream_prefetch_to_l2();
    a.half_tiles = cpu::prefill_half_tiles();
    if (w.interleaved && (interleaved_group(w.dtype) == 0 || w.rows % interleaved_group(w.dtype) != 0))
      fail(__FILE__, __LINE__, "matmul: an interleaved matrix must be Q8_0 / Q4_0 / Q5_0 / K-quant / F16 / BF16 with whole row groups", w.rows);
    job.rows_fn[i] = rows_fn(cpu::active_isa(), w.dtype, w.interleaved);
    job.first_block[i + 1] = job.first_block[i] + (w.rows + kRowBlock - 1) / kRowBlock;
    if (w.interleaved && block == 1 && num_tokens > 1 && packs_tokens(cols)) {
      if (!is_packed) {
        if (packed.floats < size_t(num_tokens * cols)) {
          packed.memory = allocate_huge_pages(size_t(num_tokens * cols) * sizeof(float));
          if (packed.memory.data == nullptr) throw std::bad_alloc();
          packed.floats = size_t(num_tokens * cols);
        }
        pack_token_tiles(x, cols, num_tokens, reinterpret_cast<float*>(packed.memory.data));
        is_packed = true;
      }
      a.xt = reinterpret_cast<const float*>(packed.memory.data);
    }
    if (block == 1) continue;
    const bool sums = is_kquant(w.dtype);  // else Q8_1 sums
    const int kind = sums ? 1 : 0;
    Activations& v = act[kind];
    if (!quantized[kind]) {
      const int ablock = cpu::activation_block_size(w.dtype);
      v.xq.resize(size_t(num_tokens * cols));
      v.xd.resize(size_t(num_tokens * (cols / ablock)));
      if (sums) v.xs.resize(size_t(num_tokens * (cols / 16)));
      else v.xm.resize(size_t(num_tokens * (cols / 32)));
      const bool with_offsets = !sums && offsets, with_corrections = !sums && corrections;
      if (with_offsets) v.xo.resize(size_t(num_tokens * (cols / 4)));
      if (with_corrections) v.xc.resize(size_t(num_tokens * (cols / 32)));
      quantize_tokens(x, cols, num_tokens, ablock, v.xq.data(), v.xd.data(), sums ? v.xs.data() : nullptr,
                      sums ? nullptr : v.xm.data(), with_offsets ? v.xo.data() : nullptr,
                      with_corrections ? v.xc.data() : nullptr);
      quantized[kind] = true;
    }
    a.xq = v.xq.data();
    a.xd = v.xd.data();
    a.xs = sums ? v.xs.data() : nullptr;
    a.xm = sums ? nullptr : v.xm.data();
    a.xo = !sums && offsets ? v.xo.data() : nullptr;
    a.xc = !sums && corrections ? v.xc.data() : nullptr;
  }

  // Every matrix shares cols and num_tokens, so every row block costs the same.
  const int64_t num_blocks = job.first_block[targets.size()];
  const int64_t macs_per_block = kRowBlock * std::max<int64_t>(1, cols) * num_tokens;
  const int64_t grain = std::max<int64_t>(1, kMinMacsPerTask / macs_per_block);
  if (grain >= num_blocks) {  // one task: skip the pool
    job.run(0, num_blocks, 0, num_tokens);
    return;
  }
  // Tasks of `grain` blocks or more, up to per_thread per thread, each a contiguous range of blocks; with
  // many tokens, each of those again per slice of kTokenSlice tokens (slice-major: consecutive tasks share
  // their activations).
  ThreadPool& pool = compute_pool();
  const int64_t per_thread = num_tokens <= kMaxDirectTokens ? kStreamTasksPerThread : kComputeTasksPerThread;
  const int64_t num_row_tasks = std::min((num_blocks + grain - 1) / grain, int64_t(pool.num_threads()) * per_thread);
  if (num_tokens <= kMaxDirectTokens) {
    run_bands(pool, job, num_blocks, std::min<int64_t>(num_row_tasks, kMaxBands), num_tokens);
    return;
  }
  const bool slices_pay = std::all_of(targets.begin(), targets.end(), [](const MatmulTarget& g) {
    return (g.w->interleaved && block_size(g.w->dtype) == 1) || is_kquant(g.w->dtype);
  });
  const int64_t num_slices = slices_pay && num_tokens / kTokenSlice >= 2 ? num_tokens / kTokenSlice : 1;
  struct Tasks {
    const GroupJob* job;
    int64_t num_blocks, num_row_tasks, num_slices, num_tokens;
  } tasks{&job, num_blocks, num_row_tasks, num_slices, num_tokens};
  pool.run(num_row_tasks * num_slices, [t = &tasks](int64_t i) {  // one pointer
    const int64_t r = i % t->num_row_tasks, k = i / t->num_row_tasks;
    const int64_t t0 = k * kTokenSlice;
    const int64_t n = k + 1 == t->num_slices ? t->num_tokens - t0 : kTokenSlice;
    t->job->run(r * t->num_blocks / t->num_row_tasks, (r + 1) * t->num_blocks / t->num_row_tasks, t0, n);
  });
}

bool interleaving_pays(const WeightMatrix& w) {
  const int64_t group = interleaved_group(w.dtype);
  return group > 0 && !w.interleaved && w.rows > 0 && w.rows % group == 0 &&
         cpu::active_isa() >= interleaved_isa(w.dtype);
}

// Row group g of plain matrix w, rearranged into its interleaved bytes at dst + g * (the group's bytes).
// The group's plain rows and its interleaved bytes span the same bytes: the group is copied to `scratch`
// (one group's bytes) first, so dst may be w.data.
static void interleave_group(const WeightMatrix& w, int64_t g, uint8_t* scratch, uint8_t* dst) {
  const int64_t rows_per_group = interleaved_group(w.dtype), row_bytes = kernels::row_bytes(w.dtype, w.cols);
  std::memcpy(scratch, static_cast<const uint8_t*>(w.data) + g * rows_per_group * row_bytes,
              size_t(rows_per_group * row_bytes));
  uint8_t* to = dst + g * rows_per_group * row_bytes;
  if (is_block_interleavable(w.dtype)) {  // block by block
    const int bytes = block_bytes(w.dtype);
    for (int64_t b = 0; b < w.cols / block_size(w.dtype); ++b) {
      const uint8_t* blocks[cpu::kLegacyGroupRows];
      for (int64_t i = 0; i < rows_per_group; ++i) blocks[i] = scratch + i * row_bytes + b * bytes;
      group_from_blocks(w.dtype, blocks, to + b * rows_per_group * bytes);
    }
    return;
  }
  if (w.dtype != DType::Q8_0) {  // column by column, the group's 32 values of each
    for (int64_t c = 0; c < w.cols; ++c)
      for (int64_t i = 0; i < rows_per_group; ++i) std::memcpy(to + (c * rows_per_group + i) * 2, scratch + i * row_bytes + c * 2, 2);
    return;
  }
  const int64_t num_blocks = w.cols / kQ8BlockSize;
  for (int64_t b = 0; b < num_blocks; ++b) {
    uint8_t* blk = to + b * kInterleavedBlockBytes;
    for (int64_t i = 0; i < kInterleavedRows; ++i) {
      const uint8_t* from = scratch + i * row_bytes + b * kQ8BlockBytes;
      std::memcpy(blk + 2 * i, from, 2);
      for (int k = 0; k < kQ8BlockSize; ++k)
        blk[2 * kInterleavedRows + (k / 4) * 4 * kInterleavedRows + 4 * i + k % 4] = uint8_t(from[2 + k] ^ 0x80);
    }
  }
}

WeightMatrix interleave_rows(const WeightMatrix& w, void* out) {
  const int64_t rows_per_group = interleaved_group(w.dtype);
  if (rows_per_group == 0 || w.interleaved || w.rows % rows_per_group != 0)
    fail(__FILE__, __LINE__, "interleave_rows: needs a plain Q8_0 / Q4_0 / Q5_0 / K-quant / F16 / BF16 matrix of whole row groups", w.rows);
  const int64_t row_bytes = kernels::row_bytes(w.dtype, w.cols);
  auto* dst = static_cast<uint8_t*>(out);
  // Groups are independent (each reads and writes only its own bytes), so they go over the compute pool in
  // tasks of about 1 MiB: a 2 GB file's matrices are rearranged at load time, which took about a second on
  // one thread for TinyLlama f16.
  struct Job {
    const WeightMatrix* w;
    int64_t group_bytes;
    uint8_t* dst;
  } job{&w, rows_per_group * row_bytes, dst};
  const auto rearrange = [j = &job](int64_t begin, int64_t end) {  // one pointer: stored inline
    std::vector<uint8_t> scratch(size_t(j->group_bytes));
    for (int64_t g = begin; g < end; ++g) interleave_group(*j->w, g, scratch.data(), j->dst);
  };
  const int64_t num_groups = w.rows / rows_per_group;
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 20) / std::max<int64_t>(1, job.group_bytes));
  if (num_groups <= grain) rearrange(0, num_groups);
  else compute_pool().parallel_for(num_groups, grain, rearrange);
  WeightMatrix m = w;
  m.data = out;
  m.interleaved = true;
  return m;
}

void matrix_row(const WeightMatrix& w, int64_t r, float* out) {
  if (!w.interleaved) {
    dequantize_row(w.dtype, static_cast<const uint8_t*>(w.data) + r * row_bytes(w.dtype, w.cols), out, w.cols);
    return;
  }
  if (is_block_interleavable(w.dtype)) {  // the row's blocks made plain again
    const int64_t group = interleaved_group(w.dtype), num_blocks = w.cols / block_size(w.dtype);
    const int bytes = block_bytes(w.dtype);
    std::vector<uint8_t> plain(size_t(row_bytes(w.dtype, w.cols)));
    for (int64_t b = 0; b < num_blocks; ++b) {
      const uint8_t* g = static_cast<const uint8_t*>(w.data) + ((r / group) * num_blocks + b) * group * bytes;
      block_from_group(w.dtype, g, int(r % group), plain.data() + b * bytes);
    }
    dequantize_row(w.dtype, plain.data(), out, w.cols);
    return;
  }
  cpu::MatmulArgs a;
  a.dtype = w.dtype;
  a.w = static_cast<const uint8_t*>(w.data);
  a.cols = w.cols;
  a.interleaved = true;
  if (w.dtype != DType::Q8_0) {
    for (int64_t c = 0; c < w.cols; ++c) out[c] = cpu::half_element(a, r, c);
    return;
  }
  for (int64_t b = 0; b < w.cols / kQ8BlockSize; ++b) {
    float d;
    int8_t q[kQ8BlockSize];
    cpu::q8_0_block(a, r, b, &d, q);
    for (int k = 0; k < kQ8BlockSize; ++k) out[b * kQ8BlockSize + k] = d * float(q[k]);
  }
}

void matmul(const WeightMatrix& w, const float* x, float* y, int64_t num_tokens) {
  const MatmulTarget target{&w, y};
  matmul(std::span<const MatmulTarget>(&target, 1), x, num_tokens);
}

}  // namespace inflight::kernels

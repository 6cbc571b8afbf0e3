// The tensor-core prompt kernel (context.h): FlashAttention-2 over the paged cache with mma.sync m16n8k16.
//
// A block is 4 warps and serves one query head for a tile of 64 rows of one sequence; warp w owns rows
// [16w, 16w + 16). Q is rotated (RoPE), rounded to f16 / bf16 and held in registers as mma A fragments. The loop
// walks the tiles of 64 keys the rows see, in key order: each tile of K and V is read from the paged cache
// (dequantized to the operand type where the cache is int8 / fp8 / f32) into shared memory, S = Q K^T on tensor
// cores, the scale / softcap / masks per element, an online softmax in registers (each row's max and sum over
// the quad of lanes that holds it), and O += P V with P re-packed from the S accumulators as A fragments.
#include "kernels/cuda/context.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/device_common.cuh"
#include "kernels/ops.h"

namespace inflight::kernels::cuda {

namespace {

using namespace detail;

constexpr int kThreads = 128;

// 2^x by the hardware's approximate exponential (what __expf uses after its multiply by log2 e).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Two floats as the operand type's pair (the first in the low half), rounded to nearest.
template <bool kBf16>
__device__ uint32_t pack2(float lo, float hi) {
  if constexpr (kBf16) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

__device__ uint32_t smem_addr(const void* ptr) { return static_cast<uint32_t>(__cvta_generic_to_shared(ptr)); }

__device__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
__device__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// d += a b for one 16 x 8 x 16 tile, f32 accumulators.
template <bool kBf16>
__device__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (kBf16)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Shared memory: stages of a K tile and a V tile, [kContextKeys, kStride] halves each. Stage 0's K holds Q while
// its fragments are loaded, and its V the f32 staging of Q (32 rows at a time).
template <int kD>
struct ContextSmem {
  static constexpr int kStride = kD + 8;  // halves per row: the 8 rows an ldmatrix reads fall in different banks
  static constexpr int kTile = kContextKeys * kStride;
  static constexpr size_t bytes(int stages) { return size_t(stages) * 2 * kTile * sizeof(uint16_t); }
};
static_assert(kContextRows == kContextKeys, "Q is staged in a K tile's place");

// f16 and bf16 caches are copied as they are, by cp.async into the stage after the one in use; others are
// dequantized through registers into a single stage.
template <KvDType kT>
inline constexpr bool kAsyncCopy = kT == KvDType::F16 || kT == KvDType::BF16;

__device__ void cp_async16(void* dst, const void* src, bool fill) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(fill ? 16 : 0)
               : "memory");
}
template <int kPending>
__device__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Where key k0 + jj of a tile is stored: its block and slot (keys past the sequence's end: the last key's,
// read and then zeroed).
struct KeyAt {
  int blk, slot;
};
__device__ KeyAt key_at(const AttentionParams& p, int seq, int64_t k0, int jj, int64_t total) {
  const int64_t j = min(k0 + jj, total - 1);
  return {p.kv.block_of(p.kv_seq(seq, j), j), int(j & (p.kv.block_size - 1))};
}

// Starts copying keys [k0, k0 + 64) of K and V into kdst / vdst (keys past the sequence's end: zeros).
template <KvDType kT, int kD>
__device__ void issue_tile(const AttentionParams& p, int seq, int kv_head, int64_t k0, int64_t total, uint16_t* kdst,
                           uint16_t* vdst) {
  constexpr int kChunks = kD / 8;
  constexpr int kPerThread = kContextKeys * kChunks / kThreads;
  const PagedKvView& kv = p.kv;
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) {
    const int c = threadIdx.x + kThreads * u, jj = c / kChunks, chunk = c % kChunks;
    const KeyAt at = key_at(p, seq, k0, jj, total);
    const int to = jj * ContextSmem<kD>::kStride + chunk * 8;
    cp_async16(kdst + to, static_cast<const uint16_t*>(kv.row(at.blk, 0, kv_head, at.slot)) + chunk * 8, k0 + jj < total);
    cp_async16(vdst + to, static_cast<const uint16_t*>(kv.row(at.blk, 1, kv_head, at.slot)) + chunk * 8, k0 + jj < total);
  }
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Keys [k0, k0 + 64) of `which` (0: K, 1: V) into dst as the operand type; keys past the sequence's end are 0.
template <KvDType kT, int kD>
__device__ void load_tile(const AttentionParams& p, int seq, int kv_head, int which, int64_t k0, int64_t total,
                          uint16_t* dst) {
  constexpr bool kB = kT == KvDType::BF16;
  constexpr int kChunks = kD / 8;                           // 8-feature chunks per row
  constexpr int kPerThread = kContextKeys * kChunks / kThreads;
  const PagedKvView& kv = p.kv;
  Raw<kT, 8> raw[kPerThread];
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) {  // every load first
    const int c = threadIdx.x + kThreads * u, jj = c / kChunks, chunk = c % kChunks;
    const KeyAt at = key_at(p, seq, k0, jj, total);
    fetch<kT, 8>(kv.row(at.blk, which, kv_head, at.slot), chunk * 8, kv.row_scales(at.blk, which, kv_head, at.slot), raw[u]);
  }
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) {
    const int c = threadIdx.x + kThreads * u, jj = c / kChunks, chunk = c % kChunks;
    float x[8];
    widen<kT, 8>(raw[u], k0 + jj < total, x);
    uint4 w;
    w.x = pack2<kB>(x[0], x[1]);
    w.y = pack2<kB>(x[2], x[3]);
    w.z = pack2<kB>(x[4], x[5]);
    w.w = pack2<kB>(x[6], x[7]);
    *reinterpret_cast<uint4*>(dst + jj * ContextSmem<kD>::kStride + chunk * 8) = w;
  }
}

// Grid (query heads, tiles). See the file comment.
template <KvDType kT, int kD>
__global__ void __launch_bounds__(kThreads)
    context_kernel(AttentionParams p, const float* rope_cos_sin, const ContextTile* tiles) {
  constexpr bool kB = kT == KvDType::BF16;
  constexpr int kStride = ContextSmem<kD>::kStride;
  constexpr int kNT = kContextKeys / 8;  // key tiles of 8 in S
  constexpr int kDT = kD / 8;            // feature tiles of 8 in O
  extern __shared__ uint4 context_smem[];
  uint16_t* const smem = reinterpret_cast<uint16_t*>(context_smem);
  auto k_tile = [&](int stage) { return smem + (2 * stage) * ContextSmem<kD>::kTile; };
  auto v_tile = [&](int stage) { return smem + (2 * stage + 1) * ContextSmem<kD>::kTile; };
  const int h = blockIdx.x, seq = tiles[blockIdx.y].seq, row0 = tiles[blockIdx.y].row0;
  const int group = p.num_q_heads / p.num_kv_heads, kv_head = h / group;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int q_len = p.q_start[seq + 1] - p.q_start[seq];
  const int64_t t0 = p.q_start[seq];
  const int64_t total = int64_t(p.past_len[seq]) + q_len;

  // Q: 32 rows at a time as f32 (rotated in place), then as the operand type.
  float* stage = reinterpret_cast<float*>(v_tile(0));
  for (int half = 0; half < 2; ++half) {
    for (int idx = threadIdx.x; idx < 32 * kD; idx += kThreads) {
      const int r = idx / kD, d = idx % kD, i = row0 + 32 * half + r;
      stage[idx] = i < q_len ? p.q[(t0 + i) * p.q_stride + int64_t(h) * kD + d] : 0.0f;
    }
    __syncthreads();
    if (p.rope_on() && threadIdx.x < 32 && row0 + 32 * half + int(threadIdx.x) < q_len)
      rotate_head(p.rope, rope_cos_sin + (t0 + row0 + 32 * half + threadIdx.x) * p.rope.rotary_dim,
                  stage + threadIdx.x * kD);
    __syncthreads();
    for (int idx = threadIdx.x; idx < 32 * kD / 2; idx += kThreads) {
      const int r = idx / (kD / 2), d = 2 * (idx % (kD / 2));
      *reinterpret_cast<uint32_t*>(&k_tile(0)[(32 * half + r) * kStride + d]) = pack2<kB>(stage[r * kD + d], stage[r * kD + d + 1]);
    }
    __syncthreads();
  }
  uint32_t qf[kD / 16][4];
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) {
    const int row = 16 * warp + lane % 8 + 8 * ((lane / 8) % 2), col = 16 * kk + 8 * (lane / 16);
    ldmatrix_x4(qf[kk], smem_addr(&k_tile(0)[row * kStride + col]));
  }

  // This lane's two rows: lane / 4 and lane / 4 + 8 of the warp's 16.
  const RowInfo rows[2] = {row_at(p, seq, row0 + 16 * warp + lane / 4),
                           row_at(p, seq, row0 + 16 * warp + lane / 4 + 8)};
  const bool live[2] = {rows[0].i < q_len, rows[1].i < q_len};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  float o[kDT][4];
#pragma unroll
  for (int n = 0; n < kDT; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[n][e] = 0.0f;

  // The keys every row of the warp sees: from its last row's lo to its first row's hi (both grow with the row).
  const bool plain = p.mask.kind == MaskKind::None && p.softcap <= 0.0f;
  // The softmax runs in log2 units (t = score * log2 e, m in t), so that each exponential is one ex2. Plain scores
  // stay raw until then: t = raw * scale_log2 inside the exponent's FMA (the row max commutes with the positive
  // scale). Masked or softcapped scores go through score_of, then into log2 units.
  constexpr float kLog2e = 1.4426950408889634f;
  const float scale_log2 = p.effective_scale() * kLog2e;
  const int warp_last = row0 + 16 * warp + 15;
  const int64_t warp_lo = warp_last < q_len ? row_at(p, seq, warp_last).lo : INT64_MAX;
  const int64_t warp_hi = warp_last < q_len ? row_at(p, seq, row0 + 16 * warp).hi : INT64_MIN;
  // The keys some row of the tile sees: from the first row's lo to the last row's hi (both grow with the row).
  const int64_t lo = row_at(p, seq, row0).lo, hi = row_at(p, seq, min(row0 + kContextRows, q_len) - 1).hi;
  const int64_t kt_first = lo / kContextKeys, kt_last = hi >= lo ? hi / kContextKeys : kt_first - 1;
  if (kAsyncCopy<kT> && kt_first <= kt_last) {
    __syncthreads();  // Q's fragments are read
    issue_tile<kT, kD>(p, seq, kv_head, kt_first * kContextKeys, total, k_tile(0), v_tile(0));
  }
  for (int64_t kt = kt_first; kt <= kt_last; ++kt) {
    const int64_t k0 = kt * kContextKeys;
    const int st = kAsyncCopy<kT> ? int((kt - kt_first) & 1) : 0;
    if constexpr (kAsyncCopy<kT>) {
      if (kt < kt_last) {  // the next tile streams in while this one is used
        issue_tile<kT, kD>(p, seq, kv_head, k0 + kContextKeys, total, k_tile(st ^ 1), v_tile(st ^ 1));
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      __syncthreads();
    } else {
      __syncthreads();  // the last tile's (or Q's) fragments are read
      load_tile<kT, kD>(p, seq, kv_head, 0, k0, total, k_tile(0));
      load_tile<kT, kD>(p, seq, kv_head, 1, k0, total, v_tile(0));
      __syncthreads();
    }
    const uint16_t* const kq = k_tile(st);
    const uint16_t* const vt = v_tile(st);

    float s[kNT][4];
#pragma unroll
    for (int n = 0; n < kNT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk)
#pragma unroll
      for (int np = 0; np < kNT / 2; ++np) {
        uint32_t b[4];
        const int key = 16 * np + 8 * (lane / 16) + lane % 8, col = 16 * kk + 8 * ((lane / 8) % 2);
        ldmatrix_x4(b, smem_addr(&kq[key * kStride + col]));
        mma<kB>(s[2 * np], qf[kk], b[0], b[1]);
        mma<kB>(s[2 * np + 1], qf[kk], b[2], b[3]);
      }

    // Scores, masks, and the online softmax of the lane's two rows (x = e / 2). A tile every row of the warp
    // sees in full, with no mask or softcap, takes its raw scores as they are (the inside of a causal prompt).
    const bool whole = plain && k0 >= warp_lo && k0 + kContextKeys - 1 <= warp_hi;
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < kNT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (!whole) {
          const RowInfo& r = rows[e / 2];
          const int64_t j = k0 + 8 * n + 2 * (lane % 4) + e % 2;
          const bool seen = live[e / 2] && j >= r.lo && j <= r.hi;
          s[n][e] = !seen ? -INFINITY : plain ? s[n][e] : score_of(p, r, h, j, s[n][e]) * kLog2e;
        }
        mx[e / 2] = fmaxf(mx[e / 2], s[n][e]);
      }
    float alpha[2];
#pragma unroll
    for (int x = 0; x < 2; ++x) {
      mx[x] = fmaxf(mx[x], __shfl_xor_sync(0xffffffffu, mx[x], 1));
      mx[x] = fmaxf(mx[x], __shfl_xor_sync(0xffffffffu, mx[x], 2));
      const float m_new = fmaxf(m[x], plain ? mx[x] * scale_log2 : mx[x]);
      // A tile the row does not see: m_new == m, alpha == 1, p == 0: the state keeps its bits.
      alpha[x] = m[x] == m_new ? 1.0f : fast_exp2(m[x] - m_new);
      m[x] = m_new;
    }
    float sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < kNT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float t = plain ? fmaf(s[n][e], scale_log2, -m[e / 2]) : s[n][e] - m[e / 2];
        s[n][e] = s[n][e] == -INFINITY ? 0.0f : fast_exp2(t);
        sum[e / 2] += s[n][e];
      }
#pragma unroll
    for (int x = 0; x < 2; ++x) l[x] = l[x] * alpha[x] + sum[x];
#pragma unroll
    for (int n = 0; n < kDT; ++n) {
      o[n][0] *= alpha[0];
      o[n][1] *= alpha[0];
      o[n][2] *= alpha[1];
      o[n][3] *= alpha[1];
    }

    // O += P V: the S accumulators of key tiles 2kk and 2kk + 1 are the A fragment of keys [16kk, 16kk + 16).
#pragma unroll
    for (int kk = 0; kk < kNT / 2; ++kk) {
      const uint32_t pa[4] = {pack2<kB>(s[2 * kk][0], s[2 * kk][1]), pack2<kB>(s[2 * kk][2], s[2 * kk][3]),
                              pack2<kB>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              pack2<kB>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int dp = 0; dp < kDT / 2; ++dp) {
        uint32_t b[4];
        const int key = 16 * kk + 8 * ((lane / 8) % 2) + lane % 8, col = 16 * dp + 8 * (lane / 16);
        ldmatrix_x4_trans(b, smem_addr(&vt[key * kStride + col]));
        mma<kB>(o[2 * dp], pa, b[0], b[1]);
        mma<kB>(o[2 * dp + 1], pa, b[2], b[3]);
      }
    }
    if constexpr (kAsyncCopy<kT>) __syncthreads();  // this stage is refilled by the next iteration's copy
  }

#pragma unroll
  for (int x = 0; x < 2; ++x) {
    l[x] += __shfl_xor_sync(0xffffffffu, l[x], 1);
    l[x] += __shfl_xor_sync(0xffffffffu, l[x], 2);
    if (!live[x]) continue;
    float* out = p.out + (t0 + rows[x].i) * int64_t(p.num_q_heads) * p.head_dim_v + int64_t(h) * kD;
#pragma unroll
    for (int n = 0; n < kDT; ++n) {
      const int d = 8 * n + 2 * (lane % 4);
      out[d] = l[x] > 0.0f ? o[n][2 * x] / l[x] : 0.0f;
      out[d + 1] = l[x] > 0.0f ? o[n][2 * x + 1] / l[x] : 0.0f;
    }
  }
}

template <KvDType kT, int kD>
void launch_dim(const AttentionParams& p, const BatchShape& shape, const ContextTile* tiles, int num_tiles,
                cudaStream_t stream) {
  const size_t bytes = ContextSmem<kD>::bytes(kAsyncCopy<kT> ? 2 : 1);
  static const bool opted_in = [&] {  // above 48 KiB of shared memory needs the kernel's consent
    INFLIGHT_CUDA_CHECK(cudaFuncSetAttribute(context_kernel<kT, kD>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    return true;
  }();
  (void)opted_in;
  const dim3 grid(unsigned(p.num_q_heads), unsigned(num_tiles));  // a tile's heads side by side: K/V from L2
  context_kernel<kT, kD><<<grid, kThreads, bytes, stream>>>(p, shape.rope_cos_sin, tiles);
}

template <KvDType kT>
struct LaunchContext {
  static void run(const AttentionParams& p, const BatchShape& shape, const ContextTile* tiles, int num_tiles,
                  cudaStream_t stream) {
    if (p.head_dim == 64) launch_dim<kT, 64>(p, shape, tiles, num_tiles, stream);
    else launch_dim<kT, 128>(p, shape, tiles, num_tiles, stream);
  }
};

}  // namespace

bool context_supported(const AttentionParams& p) { return vector_head_dim(p) != 0 && p.head_dim_v == p.head_dim; }

void attend_context(const AttentionParams& p, const BatchShape& shape, const ContextTile* tiles, int num_tiles,
                    cudaStream_t stream) {
  if (num_tiles == 0) return;
  dispatch<LaunchContext>(p.kv.dtype, p, shape, tiles, num_tiles, stream);
  INFLIGHT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace inflight::kernels::cuda

// Q8_0 and Q4_0 .. Q6_K matmuls with AVX-512 VNNI (vpdpbusd). Compiled with -mavx512vnni; reached only when
// active_isa() is Avx512Vnni.
//   Plain matrices: the 256-bit kernels of matmul_q8_int8.h / matmul_quant_int8.h; integer sums are exact,
//   so results equal matmul_rows_avx512's bit for bit.
//   Interleaved Q8_0 (kernels/matmul.h): 16 rows per 512-bit vector. Each lane holds one row's whole
//   block dot: 8 vpdpbusd per block, one per 4-column quad, each with the token's 4 quants broadcast;
//   then one float step per block for 16 outputs, the scalar kernel's (dw * dx) * dot, added in block
//   order. Results equal matmul_rows_scalar's bit for bit, whatever the tokens and rows of a call.
//   Interleaved Q4_0 / Q5_0 and the K-quants: 16 rows per 512-bit vector as well, in the plain kernels' lanes and
//   float order (matmul_quant_formula.h), so results equal theirs bit for bit.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "kernels/cpu/matmul_kquant_interleave.h"
#include "kernels/cpu/matmul_legacy_interleave.h"
#include "kernels/cpu/matmul_q8_int8.h"
#include "kernels/cpu/matmul_quant_int8.h"
#include "kernels/matmul.h"  // the interleaved layout's constants

namespace inflight::kernels::cpu {
namespace {

constexpr int kGroupRows = int(kInterleavedRows);
constexpr int kTokensPerTile = 8;  // tokens sharing each load of a group's block
// The interleaved Q8_0 and Q4_0 / Q5_0 kernels ask, with MatmulArgs::stream_to_l2 (Intel), for the bytes this
// far past each block into L2 as they start it (4-7 blocks ahead): bench_matmul q8_0i t1 1.2-1.45x there.
constexpr int64_t kStreamAheadBytesL2 = 4096;

// y[t0 .. t0 + T, 16 g .. 16 g + 16]. The quads' dot products run in kChains independent chains (their
// int32 sums are exact, so the split changes nothing) to hide vpdpbusd's latency at one or two tokens.
template <int T>
void interleaved_tile(const MatmulArgs& a, int64_t g, int64_t t0) {
  constexpr int kChains = T <= 2 ? 2 : 1;
  const int64_t num_blocks = a.cols / 32;
  const uint8_t* w = a.w + g * num_blocks * kInterleavedBlockBytes;
  const int8_t* xq = a.xq + t0 * a.cols;
  const float* xd = a.xd + t0 * num_blocks;
  const int32_t* xc = a.xc + t0 * num_blocks;
  __m512 acc[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < num_blocks; ++b) {
    const uint8_t* blk = w + b * kInterleavedBlockBytes;
    if (a.stream_to_l2) prefetch_bytes(blk + kStreamAheadBytesL2, kInterleavedBlockBytes);
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));
    __m512i dot[kChains][T];
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      dot[0][t] = _mm512_set1_epi32(xc[t * num_blocks + b]);
      if constexpr (kChains == 2) dot[1][t] = _mm512_setzero_si512();
    }
#pragma GCC unroll 8
    for (int q = 0; q < 8; ++q) {
      const __m512i wq = _mm512_loadu_si512(blk + 2 * kGroupRows + q * 4 * kGroupRows);
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t)
        dot[q % kChains][t] = _mm512_dpbusd_epi32(dot[q % kChains][t], wq, _mm512_set1_epi32(load_i32(xq + t * a.cols + b * 32 + 4 * q)));
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      __m512i d = dot[0][t];
      if constexpr (kChains == 2) d = _mm512_add_epi32(d, dot[1][t]);
      const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(xd[t * num_blocks + b]));
      acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(scale, _mm512_cvtepi32_ps(d)));
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) _mm512_storeu_ps(a.y + (t0 + t) * a.rows + g * kGroupRows, acc[t]);
}

// Group by group, all token tiles over one group's blocks while they sit in L1.
void matmul_interleaved(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
  for (int64_t g = row_begin / kGroupRows; g < row_end / kGroupRows; ++g) {
    prefetch_ahead(a, g * kGroupRows, kGroupRows, row_begin, row_end);  // a group spans its 16 rows' bytes
    for (int64_t t0 = 0; t0 < a.num_tokens; t0 += kTokensPerTile) {
      switch (a.num_tokens - t0 < kTokensPerTile ? a.num_tokens - t0 : kTokensPerTile) {
        case 1: interleaved_tile<1>(a, g, t0); break;
        case 2: interleaved_tile<2>(a, g, t0); break;
        case 3: interleaved_tile<3>(a, g, t0); break;
        case 4: interleaved_tile<4>(a, g, t0); break;
        case 5: interleaved_tile<5>(a, g, t0); break;
        case 6: interleaved_tile<6>(a, g, t0); break;
        case 7: interleaved_tile<7>(a, g, t0); break;
        default: interleaved_tile<8>(a, g, t0); break;
      }
    }
  }
}

// The 16-row group kernels below (Q4_0 / Q5_0 and the K-quants) keep each row's 8 lanes of
// matmul_quant_formula.h in 8 float accumulators per token: zeroed here, and at the end added in
// legacy_reduce's order and stored to y[t0 + t, 16 g .. 16 g + 16].
constexpr int64_t kBlockGroupRows = kLegacyGroupRows;
static_assert(kKQuantGroupRows == kBlockGroupRows);

template <int T>
inline void zero_group_lanes(__m512 acc[8][T]) {
#pragma GCC unroll 8
  for (int q = 0; q < 8; ++q)
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) acc[q][t] = _mm512_setzero_ps();
}

template <int T>
inline void store_group_lanes(const __m512 acc[8][T], const MatmulArgs& a, int64_t g, int64_t t0) {
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) {
    const __m512 sum = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0][t], acc[4][t]), _mm512_add_ps(acc[2][t], acc[6][t])),
                                     _mm512_add_ps(_mm512_add_ps(acc[1][t], acc[5][t]), _mm512_add_ps(acc[3][t], acc[7][t])));
    _mm512_storeu_ps(a.y + (t0 + t) * a.rows + g * kBlockGroupRows, sum);
  }
}

using GroupTile = void (*)(const MatmulArgs& a, int64_t g, int64_t t0);

// Rows [row_begin, row_end) (whole groups of 16) at any number of tokens: kThree (where not null) for each
// three tokens, then kTwo for each pair, kOne for an odd last one. Every token's lanes are computed alike in
// each, so the tiling never changes a result. Running a group tile beats unpacking rows for the per-row
// kernel even at 512 tokens (bench_matmul, 2 threads: q4_ki 2048x5632 t8 431 against 1284 us, t32 2035
// against 3271, t512 27.5 against 51.2 ms; q5_0i 3072x576 t8 117 against 317 us, t512 4.95 against 8.28 ms).
// The K-quants take three tokens per tile, each group-block's quants unpacked once for three, though the
// accumulators then spill in part (Intel host, t512, 4 alternating runs: q4_ki 1.0-1.8x, median about
// 1.27x; q5_ki and q6_ki 0.92-1.57x, mostly above 1.1x; TinyLlama Q4_K_M prefill 1.11x, SmolLM 1.02x).
template <GroupTile kThree, GroupTile kTwo, GroupTile kOne>
void run_group_tiles(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
  for (int64_t g = row_begin / kBlockGroupRows; g < row_end / kBlockGroupRows; ++g) {
    int64_t t0 = 0;
    if constexpr (kThree != nullptr)
      for (; t0 + 3 <= a.num_tokens; t0 += 3) kThree(a, g, t0);
    for (; t0 + 2 <= a.num_tokens; t0 += 2) kTwo(a, g, t0);
    if (t0 < a.num_tokens) kOne(a, g, t0);
  }
}

// Chunk c of a Q4_0 / Q5_0 group-block as the unsigned quants of quads c (u[0]) and c + 4 (u[1]) of its
// 16 rows: the nibbles, plus 16 where Q5_0's fifth bit is set.
template <bool kFive>
inline void legacy_chunk_quads(const uint8_t* gb, int c, __m512i u[2]) {
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  const __m512i n = _mm512_loadu_si512(gb + legacy_nibbles_at(kFive) + 64 * c);
  u[0] = _mm512_and_si512(n, low4);
  u[1] = _mm512_and_si512(_mm512_srli_epi16(n, 4), low4);
  if constexpr (kFive) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __mmask64 fifth;
      __builtin_memcpy(&fifth, gb + kLegacyMasksAt + 8 * (c + 4 * h), 8);
      u[h] = _mm512_mask_add_epi8(u[h], fifth, u[h], _mm512_set1_epi8(16));
    }
  }
}

// Interleaved Q4_0 / Q5_0 (matmul_legacy_interleave.h), y[t0 .. t0 + T, 16 g .. 16 g + 16] (MatmulArgs::xo
// set). Per block, each 4-column quad q of the 16 rows is one vector of unsigned quants u
// (nibbles, plus 16 where Q5_0's fifth bit is set): lane i = row i's u . x over the quad, from the start
// -off * (the quad's sum of x) (xo: off 16 for Q5_0, 8 for Q4_0), is lane q of row i in
// matmul_quant_formula.h, and goes into its own float accumulator; the 8 are added in legacy_reduce's order.
// So every row gets the bits of the plain kernels, 16 rows per instruction instead of one.
template <bool kFive, int T>
void legacy_group_tile(const MatmulArgs& a, int64_t g, int64_t t0) {
  constexpr int64_t kGroupBytes = kLegacyGroupRows * legacy_plain_bytes(kFive);
  const int64_t num_blocks = a.cols / 32;
  const uint8_t* w = a.w + g * num_blocks * kGroupBytes;
  const int8_t* xq = a.xq + t0 * a.cols;
  const float* xd = a.xd + t0 * num_blocks;
  const int32_t* xo = a.xo + t0 * num_blocks * 8;
  __m512 acc[8][T];
  zero_group_lanes<T>(acc);
  for (int64_t b = 0; b < num_blocks; ++b) {
    const uint8_t* gb = w + b * kGroupBytes;
    if (a.stream_to_l2) prefetch_bytes(gb + kStreamAheadBytesL2, kGroupBytes);
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(gb)));
    __m512 scale[T];
#pragma GCC unroll 2
    for (int t = 0; t < T; ++t) scale[t] = _mm512_mul_ps(dw, _mm512_set1_ps(xd[t * num_blocks + b]));
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      __m512i u[2];
      legacy_chunk_quads<kFive>(gb, c, u);
#pragma GCC unroll 2
      for (int t = 0; t < T; ++t) {
        const int32_t* o = xo + (t * num_blocks + b) * 8;
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          const int q = c + 4 * h;
          const __m512i start = _mm512_set1_epi32(kFive ? o[q] : o[q] >> 1);
          const __m512i x = _mm512_set1_epi32(load_i32(xq + t * a.cols + b * 32 + 4 * q));
          acc[q][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start, u[h], x)), scale[t], acc[q][t]);
        }
      }
    }
  }
  store_group_lanes<T>(acc, a, g, t0);
}

// The 6-bit scales and mins of a Q4_K / Q5_K group-block's 16 rows, row i in dword lane i, a byte each, as
// Q45KFormat::scales unpacks one row's: sc[0] bytes sc_0 .. sc_3, sc[1] sc_4 .. sc_7, mn[0] m_0 .. m_3, mn[1]
// m_4 .. m_7.
struct KQuantGroupScales {
  __m512i sc[2], mn[2];
};

inline KQuantGroupScales kquant_group_scales(const uint8_t* gb) {
  const __m512i z0 = _mm512_loadu_si512(gb + kKQuantScalesAt), z1 = _mm512_loadu_si512(gb + kKQuantScalesAt + 64);
  const __m512i z2 = _mm512_loadu_si512(gb + kKQuantScalesAt + 128);
  const __m512i six = _mm512_set1_epi8(0x3f), four = _mm512_set1_epi8(0x0f), top = _mm512_set1_epi8(0x30);
  KQuantGroupScales s;
  s.sc[0] = _mm512_and_si512(z0, six);
  s.mn[0] = _mm512_and_si512(z1, six);
  s.sc[1] = _mm512_or_si512(_mm512_and_si512(z2, four), _mm512_and_si512(_mm512_srli_epi32(z0, 2), top));
  s.mn[1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(z2, 4), four), _mm512_and_si512(_mm512_srli_epi32(z1, 2), top));
  return s;
}

// vpshufb controls that put byte k of each dword into its int16 halves (dup) or its low byte alone.
constexpr int byte_pick(int k, int p, bool dup) { return (4 * p + k) | 0x80 << 8 | (dup ? 4 * p + k : 0x80) << 16 | 0x80 << 24; }
inline __m512i byte_of_dwords(__m512i v, int k, bool dup) {
  const int c0 = byte_pick(k, 0, dup), c1 = byte_pick(k, 1, dup), c2 = byte_pick(k, 2, dup), c3 = byte_pick(k, 3, dup);
  return _mm512_shuffle_epi8(v, _mm512_setr_epi32(c0, c1, c2, c3, c0, c1, c2, c3, c0, c1, c2, c3, c0, c1, c2, c3));
}

// Interleaved Q4_K / Q5_K (matmul_kquant_interleave.h), y[t0 .. t0 + T, 16 g .. 16 g + 16]. Lane i of
// each vector is row i. Per super-block and 4-column quad q: for each chunk k, maddubs of the 16 rows'
// quants (nibbles, plus 16 where Q5_K's fifth bit is set) with the token's 4 quants, times sc_k in a vpdpwssd, summed over k: lane q of matmul_quant_formula.h
// (exact, so the order of k does not matter), folded into its own float accumulator with d and, through the
// chunk's activation sum, m_q and dmin; the 8 are added in legacy_reduce's order. So every row gets the
// plain kernels' bits, 16 rows per instruction instead of one.
template <bool kFive, int T>
void kquant_group_tile(const MatmulArgs& a, int64_t g, int64_t t0) {
  constexpr int64_t kGroupBytes = kKQuantGroupRows * kquant_plain_bytes(kFive);
  const int64_t num_blocks = a.cols / 256;
  const uint8_t* w = a.w + g * num_blocks * kGroupBytes;
  const int8_t* xq = a.xq + t0 * a.cols;
  const float* xd = a.xd + t0 * num_blocks;
  const int16_t* xs = a.xs + t0 * (a.cols / 16);
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  __m512 acc[8][T];
  zero_group_lanes<T>(acc);
  for (int64_t b = 0; b < num_blocks; ++b) {
    const uint8_t* gb = w + b * kGroupBytes;
    prefetch_stream(gb, kGroupBytes, a.stream_to_l2);
    const KQuantGroupScales s = kquant_group_scales(gb);
    __m512i sc[8];  // int16 pairs of sc_k
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) sc[k] = byte_of_dwords(s.sc[k / 4], k % 4, true);
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(gb)));
    const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(gb + kKQuantMinsAt)));
    __m512 dd[T], dm[T];
    alignas(32) float xsum[T][8];  // the token's sums of xq over each chunk
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const __m512 dx = _mm512_set1_ps(xd[t * num_blocks + b]);
      dd[t] = _mm512_mul_ps(d, dx);
      dm[t] = _mm512_mul_ps(dmin, dx);
      const __m256i s16 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs + t * (a.cols / 16) + 16 * b));
      _mm256_store_ps(xsum[t], _mm256_cvtepi32_ps(_mm256_madd_epi16(s16, _mm256_set1_epi16(1))));
    }
    // Quad q's chunks 2h, 2h + 1 for every token: into l[t] (h == 0: l[t] starts there).
    const auto quad_chunks = [&](int q, int h, __m512i* l) __attribute__((always_inline)) {
      const __m512i n = _mm512_loadu_si512(gb + kquant_nibbles_at(kFive, q, h));
      __m512i u0 = _mm512_and_si512(n, low4), u1 = _mm512_and_si512(_mm512_srli_epi16(n, 4), low4);
      if constexpr (kFive) {  // bit k of each byte of `high`: column 4q + e's fifth bit in chunk k
        const __m512i high = _mm512_loadu_si512(gb + kKQuantHighAt + 64 * q);
        u0 = _mm512_mask_add_epi8(u0, _mm512_test_epi8_mask(high, _mm512_set1_epi8(char(1 << (2 * h)))), u0, _mm512_set1_epi8(16));
        u1 = _mm512_mask_add_epi8(u1, _mm512_test_epi8_mask(high, _mm512_set1_epi8(char(2 << (2 * h)))), u1, _mm512_set1_epi8(16));
      }
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const int8_t* x = xq + t * a.cols + 256 * b + 64 * h + 4 * q;
        const __m512i p0 = _mm512_maddubs_epi16(u0, _mm512_set1_epi32(load_i32(x)));
        const __m512i p1 = _mm512_maddubs_epi16(u1, _mm512_set1_epi32(load_i32(x + 32)));
        l[t] = h == 0 ? _mm512_madd_epi16(p0, sc[2 * h]) : _mm512_dpwssd_epi32(l[t], p0, sc[2 * h]);
        l[t] = _mm512_dpwssd_epi32(l[t], p1, sc[2 * h + 1]);
      }
    };
    // Quad q's integer sums l[t] into its float accumulators.
    const auto fold_quad = [&](int q, const __m512i* l) __attribute__((always_inline)) {
      const __m512 mq = _mm512_cvtepi32_ps(byte_of_dwords(s.mn[q / 4], q % 4, false));
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        acc[q][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(l[t]), dd[t], acc[q][t]);
        acc[q][t] = _mm512_fnmadd_ps(_mm512_mul_ps(mq, _mm512_set1_ps(xsum[t][q])), dm[t], acc[q][t]);
      }
    };
    if constexpr (T == 1) {
      // One token: the 8 quads' sums advance together, chunk pair by chunk pair, so 8 independent chains
      // of multiply-adds fill the port (quad by quad, each quad's 8 chained steps waited on each other's
      // latency: 1.2x slower from L2, 1-2 % slower in a decode). The sums are exact: the same bits.
      __m512i l[8];
#pragma GCC unroll 4
      for (int h = 0; h < 4; ++h)
#pragma GCC unroll 8
        for (int q = 0; q < 8; ++q) quad_chunks(q, h, &l[q]);
#pragma GCC unroll 8
      for (int q = 0; q < 8; ++q) fold_quad(q, &l[q]);
    } else {
#pragma GCC unroll 8
      for (int q = 0; q < 8; ++q) {
        __m512i l[T];
#pragma GCC unroll 4
        for (int h = 0; h < 4; ++h) quad_chunks(q, h, l);
        fold_quad(q, l);
      }
    }
  }
  store_group_lanes<T>(acc, a, g, t0);
}

// vpshufb controls that put bytes k and k2 of each dword into the high bytes of its int16 halves: an
// arithmetic shift right by 8 then gives them sign-extended.
constexpr int high_bytes_pick(int k, int k2, int p) { return 0x80 | (4 * p + k) << 8 | 0x80 << 16 | (4 * p + k2) << 24; }
inline __m512i signed_bytes_of_dwords(__m512i v, int k, int k2) {
  const int c0 = high_bytes_pick(k, k2, 0), c1 = high_bytes_pick(k, k2, 1), c2 = high_bytes_pick(k, k2, 2),
            c3 = high_bytes_pick(k, k2, 3);
  return _mm512_srai_epi16(
      _mm512_shuffle_epi8(v, _mm512_setr_epi32(c0, c1, c2, c3, c0, c1, c2, c3, c0, c1, c2, c3, c0, c1, c2, c3)), 8);
}

// Interleaved Q6_K (matmul_kquant_interleave.h), y[t0 .. t0 + T, 16 g .. 16 g + 16]. Lane i of each vector
// is row i. Per super-block and quad q: for each chunk c, the 16 rows' 6-bit quants (nibble, plus the high
// bits shifted to bits 4 and 5), maddubs with the token's 4 quants, times the scale of the chunk's 16-column
// group q falls in (2c, or 2c + 1 for q >= 4) in a vpdpwssd, summed over c; minus 32 times the scaled
// activation sums of groups 2q and 2q + 1: lane q of matmul_quant_formula.h, exact, into its own float
// accumulator with d; the 8 are added in legacy_reduce's order: the plain kernels' bits.
template <int T>
void q6k_group_tile(const MatmulArgs& a, int64_t g, int64_t t0) {
  constexpr int64_t kGroupBytes = kKQuantGroupRows * kQ6KBytes;
  constexpr int kOr = 0xf8;  // vpternlogd: a | (b & c)
  const int64_t num_blocks = a.cols / 256;
  const uint8_t* w = a.w + g * num_blocks * kGroupBytes;
  const int8_t* xq = a.xq + t0 * a.cols;
  const float* xd = a.xd + t0 * num_blocks;
  const int16_t* xs = a.xs + t0 * (a.cols / 16);
  const __m512i low4 = _mm512_set1_epi8(0x0f), bits45 = _mm512_set1_epi8(0x30);
  __m512 acc[8][T];
  zero_group_lanes<T>(acc);
  for (int64_t b = 0; b < num_blocks; ++b) {
    const uint8_t* gb = w + b * kGroupBytes;
    prefetch_stream(gb, kGroupBytes, a.stream_to_l2);
    __m512i words[4];  // the int8 group scales, word j: groups 4j .. 4j + 3
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) words[j] = _mm512_loadu_si512(gb + 64 * j);
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(gb + kQ6KScaleAt)));
    __m512 dd[T];
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) dd[t] = _mm512_mul_ps(d, _mm512_set1_ps(xd[t * num_blocks + b]));
#pragma GCC unroll 2
    for (int half = 0; half < 2; ++half) {  // quads 0 .. 3 take groups 2c, quads 4 .. 7 groups 2c + 1
      __m512i sc[8];
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
        const int group = 2 * c + half;
        sc[c] = signed_bytes_of_dwords(words[group / 4], group % 4, group % 4);
      }
      // Quad q's chunks 4h .. 4h + 3 for every token: into l[t] (h == 0: l[t] starts there).
      const auto quad_chunks = [&](int q, int h, __m512i* l) __attribute__((always_inline)) {
        const uint8_t* v = gb + q6k_quants_at(q, h);
        const __m512i high = _mm512_loadu_si512(v), l0 = _mm512_loadu_si512(v + 64), l1 = _mm512_loadu_si512(v + 128);
        __m512i u[4];
        u[0] = _mm512_ternarylogic_epi32(_mm512_and_si512(l0, low4), _mm512_slli_epi16(high, 4), bits45, kOr);
        u[1] = _mm512_ternarylogic_epi32(_mm512_and_si512(l1, low4), _mm512_slli_epi16(high, 2), bits45, kOr);
        u[2] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(l0, 4), low4), high, bits45, kOr);
        u[3] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(l1, 4), low4), _mm512_srli_epi16(high, 2), bits45, kOr);
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
#pragma GCC unroll 4
          for (int k = 0; k < 4; ++k) {
            const int c = 4 * h + k;
            const __m512i p = _mm512_maddubs_epi16(u[k], _mm512_set1_epi32(load_i32(xq + t * a.cols + 256 * b + 32 * c + 4 * q)));
            l[t] = c == 0 ? _mm512_madd_epi16(p, sc[0]) : _mm512_dpwssd_epi32(l[t], p, sc[c]);
          }
        }
      };
      // Quad q's integer sums l[t], less 32 times its groups' scaled activation sums, into its accumulators.
      const auto fold_quad = [&](int q, const __m512i* l) __attribute__((always_inline)) {
        const __m512i pair = signed_bytes_of_dwords(words[q / 2], 2 * (q % 2), 2 * (q % 2) + 1);  // groups 2q, 2q + 1
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          int32_t sums;  // xs of groups 2q and 2q + 1
          __builtin_memcpy(&sums, xs + t * (a.cols / 16) + 16 * b + 2 * q, 4);
          const __m512i off = _mm512_madd_epi16(pair, _mm512_set1_epi32(sums));
          const __m512i lanes = _mm512_sub_epi32(l[t], _mm512_slli_epi32(off, 5));
          acc[q][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lanes), dd[t], acc[q][t]);
        }
      };
      if constexpr (T == 1) {  // the half's 4 quads advance together, as in kquant_group_tile
        __m512i l[4];
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h)
#pragma GCC unroll 4
          for (int q = 0; q < 4; ++q) quad_chunks(4 * half + q, h, &l[q]);
#pragma GCC unroll 4
        for (int q = 0; q < 4; ++q) fold_quad(4 * half + q, &l[q]);
      } else {
#pragma GCC unroll 4
        for (int q = 4 * half; q < 4 * half + 4; ++q) {
          __m512i l[T];
#pragma GCC unroll 2
          for (int h = 0; h < 2; ++h) quad_chunks(q, h, l);
          fold_quad(q, l);
        }
      }
    }
  }
  store_group_lanes<T>(acc, a, g, t0);
}

}  // namespace

void matmul_rows_avx512_vnni(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
  if (a.interleaved) {
    switch (a.dtype) {
      case DType::Q4_0: run_group_tiles<nullptr, legacy_group_tile<false, 2>, legacy_group_tile<false, 1>>(a, row_begin, row_end); return;
      case DType::Q5_0: run_group_tiles<nullptr, legacy_group_tile<true, 2>, legacy_group_tile<true, 1>>(a, row_begin, row_end); return;
      case DType::Q4_K: run_group_tiles<kquant_group_tile<false, 3>, kquant_group_tile<false, 2>, kquant_group_tile<false, 1>>(a, row_begin, row_end); return;
      case DType::Q5_K: run_group_tiles<kquant_group_tile<true, 3>, kquant_group_tile<true, 2>, kquant_group_tile<true, 1>>(a, row_begin, row_end); return;
      case DType::Q6_K: run_group_tiles<q6k_group_tile<3>, q6k_group_tile<2>, q6k_group_tile<1>>(a, row_begin, row_end); return;
      default: matmul_interleaved(a, row_begin, row_end); return;  // Q8_0
    }
  }
  if (a.dtype == DType::Q8_0) run_tiled<Block32Kernel<Q8Format, VnniDot, 32>>(a, row_begin, row_end);
  else run_quant<VnniDot, VnniScaledDot, 32>(a, row_begin, row_end);
}

}  // namespace inflight::kernels::cpu

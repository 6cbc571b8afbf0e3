// Q8_0 and Q4_0 .. Q6_K matmuls with AVX-512 VNNI (vpdpbusd). Compiled with -mavx512vnni; reached only when
// active_isa() is Avx512Vnni.
//   Plain matrices: the 256-bit kernels of matmul_q8_int8.h / matmul_quant_int8.h; integer sums are exact,
//   so results equal matmul_rows_avx512's bit for bit.
//   Interleaved Q8_0 (kernels/matmul.h): 16 rows per 512-bit vector. Each lane holds one row's whole
//   block dot: 8 vpdpbusd per block, one per 4-column quad, each with the token's 4 quants broadcast;
//   then one float step per block for 16 outputs, the scalar kernel's (dw * dx) * dot, added in block
//   order. Results equal matmul_rows_scalar's bit for bit, whatever the tokens and rows of a call.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/matmul_q8_int8.h"
#include "kernels/cpu/matmul_quant_int8.h"
#include "kernels/matmul.h"  // the interleaved layout's constants

namespace inflight::kernels::cpu {
namespace {

constexpr int kGroupRows = int(kInterleavedRows);
constexpr int kTokensPerTile = 8;  // tokens sharing each load of a group's block

inline int32_t load_i32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

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

}  // namespace

void matmul_rows_avx512_vnni(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
  if (a.interleaved) matmul_interleaved(a, row_begin, row_end);
  else if (a.dtype == DType::Q8_0) run_tiled<Block32Kernel<Q8Format, VnniDot, 32>>(a, row_begin, row_end);
  else run_quant<VnniDot, VnniScaledDot, 32>(a, row_begin, row_end);
}

}  // namespace inflight::kernels::cpu

// How the integer dot products of the Q4_0 .. Q6_K matmuls become floats: one expression per block,
// shared by the scalar file and every SIMD file so all ISAs compute the same bits. The integer parts
// are exact; u are the stored unsigned quants (0 .. 2^bits - 1), xq the int8 activations, xs their sums.
//   Q4_0 .. Q5_1 (per 32), in 8 lanes of 4 elements, as llama.cpp's AVX2 vec_dot: lane i of block b has
//     the exact int  l_i = sum_{e in 4i..4i+3} (u_e - off) * xq_e   (off = 8 / 16 for Q4_0 / Q5_0, else 0),
//     acc_i = fma(float(l_i), dw * dx, acc_i) over the blocks in order; Q4_1 / Q5_1 also msum += mw * xm
//     in block order; y = legacy_finish(legacy_reduce(acc), msum). dx and xm (the f32 scale times the
//     block's sum of xq) come rounded to f16, as llama.cpp's Q8_0 / Q8_1 blocks store them.
//   Q4_K / Q5_K (per 256):  dx * (d * isum - dmin * msum),   isum = sum_j sc_j * dot_j (8 sub-blocks of 32),
//                                                             msum = sum_j m_j * xsum_j
//   Q6_K (per 256):         dx * (d * isum),                 isum = sum_g sc_g * (dot_g - 32 * xsum_g)
//                                                             (16 groups of 16)
// Range: |dot_j| <= 32 * 63 * 127 < 2^18, so every isum fits int32 with room to spare.
//
// NOTE: anonymous namespace: included by the per-ISA files (see matmul_kernels.h).
#pragma once
#include <cstdint>

namespace inflight::kernels::cpu {
namespace {

// The fixed-order sum of the 8 lanes (reduce_add_ps in the SIMD files).
inline float legacy_reduce(const float a[8]) { return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7])); }

inline float legacy_finish(float lanes, float msum) { return lanes + msum; }

inline float q45k_term(float d, float dmin, float dx, int32_t isum, int32_t msum) {
  return dx * (d * float(isum) - dmin * float(msum));
}

inline float q6k_term(float d, float dx, int32_t isum) { return dx * (d * float(isum)); }

}  // namespace
}  // namespace inflight::kernels::cpu

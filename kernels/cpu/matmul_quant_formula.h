// How the integer dot products of the Q4_0 .. Q6_K matmuls become floats: one expression per block,
// shared by the scalar file and every SIMD file so all ISAs compute the same bits. The integer parts
// are exact; u are the stored unsigned quants (0 .. 2^bits - 1), xq the int8 activations, xs their sums.
//   Q4_0 / Q5_0 (per 32):   (dw * dx) * (dot - off * xsum),       off = 8 / 16, dot = sum u * xq
//   Q4_1 / Q5_1 (per 32):   (dw * dx) * dot + mw * xm
//     dx and xm (the f32 scale times xsum) come rounded to f16, as llama.cpp's Q8_0 / Q8_1 blocks store them.
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

inline float legacy_offset_term(float dw, float dx, int32_t dot, int32_t xsum, int32_t offset) {
  return (dw * dx) * float(dot - offset * xsum);
}

inline float legacy_min_term(float dw, float mw, float dx, int32_t dot, float xm) {
  return (dw * dx) * float(dot) + mw * xm;
}

inline float q45k_term(float d, float dmin, float dx, int32_t isum, int32_t msum) {
  return dx * (d * float(isum) - dmin * float(msum));
}

inline float q6k_term(float d, float dx, int32_t isum) { return dx * (d * float(isum)); }

}  // namespace
}  // namespace inflight::kernels::cpu

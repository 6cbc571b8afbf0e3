// How the integer dot products of the Q4_0 .. Q6_K matmuls become floats: one expression per block,
// shared by the scalar file and every SIMD file so all ISAs compute the same bits. The integer parts
// are exact; u are the stored unsigned quants (0 .. 2^bits - 1), xq the int8 activations, xs their sums.
//   Q4_0 .. Q5_1 (per 32), in 8 lanes of 4 elements, as llama.cpp's AVX2 vec_dot: lane i of block b has
//     the exact int  l_i = sum_{e in 4i..4i+3} (u_e - off) * xq_e   (off = 8 / 16 for Q4_0 / Q5_0, else 0),
//     acc_i = fma(float(l_i), dw * dx, acc_i) over the blocks in order; Q4_1 / Q5_1 also msum += mw * xm
//     in block order; y = legacy_reduce(acc), plus msum for Q4_1 / Q5_1 (legacy_finish). dx and xm (the f32
//     scale times the block's sum of xq) come rounded to f16, as llama.cpp's Q8_0 / Q8_1 blocks store them.
//   Q4_K / Q5_K / Q6_K (per 256), in the same 8 lanes: lane i of super-block b has the exact int
//     l_i = sum_k sc_k * sum_{e in 4i..4i+3} u_{32k+e} * xq_{32k+e}   (k: the 8 chunks of 32; for Q6_K,
//     sc_k is the scale of the 16-group holding e: group 2k for lanes 0..3, 2k + 1 for 4..7), and
//     Q4_K / Q5_K:  acc_i = fma(-float(m_i * (xs_2i + xs_2i+1)), dmin * dx, fma(float(l_i), d * dx, acc_i))
//     Q6_K:         acc_i = fma(float(l_i - 32 * (sc_2i * xs_2i + sc_2i+1 * xs_2i+1)), d * dx, acc_i)
//     over the super-blocks in order (xs: the 16 sums of 16 activations; Q6_K's offset 32 goes through
//     them); y = legacy_reduce(acc).
// Range: |l_i| <= 8 * 128 * 4 * 63 * 127 < 2^25 and the offsets are smaller: every lane fits int32.
//
// NOTE: anonymous namespace: included by the per-ISA files (see matmul_kernels.h).
#pragma once
#include <cstdint>

namespace inflight::kernels::cpu {
namespace {

// The fixed-order sum of the 8 lanes (reduce_add_ps in the SIMD files).
inline float legacy_reduce(const float a[8]) { return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7])); }

inline float legacy_finish(float lanes, float msum) { return lanes + msum; }

}  // namespace
}  // namespace inflight::kernels::cpu

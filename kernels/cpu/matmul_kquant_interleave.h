// The interleaved layouts of Q4_K, Q5_K and Q6_K matrices (kernels/matmul.h). Q4_K / Q5_K: 16 rows per group, and per group and
// 256-column super-block the 16 rows' super-blocks rearranged so that one 512-bit load holds one 4-column
// quad of all 16 rows for two chunks of 32 (matmul_avx512_vnni.cpp). The same bytes as the 16 plain blocks:
//   [0, 32)             the 16 f16 scales d, row i at 2i
//   [32, 64)            the 16 f16 scales dmin, row i at 32 + 2i
//   [64, 256)           the packed 6-bit scales and mins: 3 words of 64 bytes, word j's bytes 4i .. 4i + 3 =
//                       bytes 4j .. 4j + 3 of row i's 12
//   Q5_K: [256, 768)    the fifth bits: 8 x 64 bytes, vector q's bytes 4i .. 4i + 3 = bytes 4q .. 4q + 3 of
//                       row i's qh, so bit k of each is column 4q + e's fifth bit in chunk k
//   then 32 x 64 bytes  the nibbles: vector 8h + q, bytes 4i .. 4i + 3 = bytes 32h + 4q .. 32h + 4q + 3 of row
//                       i's qs, so their low nibbles are columns 4q + e of chunk 2h, their high nibbles those
//                       of chunk 2h + 1 (chunk-pair-major: a one-token tile reads the vectors in order)
// A plain block is d, dmin (f16), the 12 scale bytes (kquant_scale_min), for Q5_K qh (32 bytes: bit k of
// byte j is column j's fifth bit in chunk k), then qs (128 bytes: byte 32h + j holds column j of chunk 2h in
// its low nibble and of chunk 2h + 1 in its high one), as GGUF stores them.
// Q6_K, per group and super-block (3360 bytes, the 16 plain blocks' bytes):
//   [0, 256)            the int8 scales of the 16-column groups: 4 words of 64 bytes, word j's bytes
//                       4i .. 4i + 3 = scales 4j .. 4j + 3 of row i
//   then 48 x 64 bytes  for each quad q and half h, at q6k_quants_at(q, h) (quads 0 .. 3 for h = 0, then for
//                       h = 1, then quads 4 .. 7 likewise: the order a one-token tile reads them): the high
//                       bits (bytes 4i .. 4i + 3 = bytes 32h + 4q .. 32h + 4q + 3 of row i's qh: bits 2k,
//                       2k + 1 of chunk 4h + k),
//                       then the low nibbles j = 0, 1 (bytes 64h + 32j + 4q .. + 3 of row i's ql: chunk 4h + j
//                       in the low nibbles, 4h + j + 2 in the high ones)
//   [3328, 3360)        the 16 f16 scales d
// A plain Q6_K block is ql (128 bytes), qh (64), the 16 int8 scales, then d (f16), as GGUF stores them.
//
// NOTE: anonymous namespace: included by the per-ISA files (see matmul_kernels.h).
#pragma once
#include <cstdint>

#include "kernels/dtype.h"  // DType only: no dtype.h function is called here (see matmul_kernels.h)

namespace inflight::kernels::cpu {
namespace {

constexpr int64_t kKQuantGroupRows = 16;
// Bytes of one plain super-block: 144 (Q4_K) or 176 (Q5_K).
constexpr int kquant_plain_bytes(bool five) { return five ? 176 : 144; }
// Where a group-block's dmin, scale words and fifth bits (Q5_K) start.
constexpr int kKQuantMinsAt = 32, kKQuantScalesAt = 64, kKQuantHighAt = 256;
// Where the nibble vector of quad q, chunks 2h and 2h + 1, starts: h by h, the order a one-token tile reads them.
constexpr int kquant_nibbles_at(bool five, int q, int h) { return (five ? 768 : 256) + 64 * (8 * h + q); }

// Where each piece of row i's plain super-block sits in its group-block: move(plain_offset, group_offset,
// bytes) for every piece, so one description serves both directions.
template <class Move>
inline void q45k_pieces(bool five, int i, Move move) {
  move(0, 2 * i, 2);
  move(2, kKQuantMinsAt + 2 * i, 2);
  for (int j = 0; j < 3; ++j) move(4 + 4 * j, kKQuantScalesAt + 64 * j + 4 * i, 4);
  if (five)
    for (int q = 0; q < 8; ++q) move(16 + 4 * q, kKQuantHighAt + 64 * q + 4 * i, 4);
  const int qs = five ? 48 : 16;
  for (int h = 0; h < 4; ++h)
    for (int q = 0; q < 8; ++q) move(qs + 32 * h + 4 * q, kquant_nibbles_at(five, q, h) + 4 * i, 4);
}

constexpr int kQ6KBytes = 210;
constexpr int kQ6KQuantsAt = 256, kQ6KScaleAt = 3328;
// Where quad q's high bits for half h start (its low nibbles follow): half by half of the quads, h by h.
constexpr int q6k_quants_at(int q, int h) { return kQ6KQuantsAt + 192 * (8 * (q / 4) + 4 * h + q % 4); }

template <class Move>
inline void q6k_pieces(int i, Move move) {
  for (int j = 0; j < 4; ++j) move(192 + 4 * j, 64 * j + 4 * i, 4);
  for (int q = 0; q < 8; ++q) {
    for (int h = 0; h < 2; ++h) {
      const int v = q6k_quants_at(q, h) + 4 * i;
      move(128 + 32 * h + 4 * q, v, 4);
      for (int j = 0; j < 2; ++j) move(64 * h + 32 * j + 4 * q, v + 64 * (1 + j), 4);
    }
  }
  move(208, kQ6KScaleAt + 2 * i, 2);
}

template <class Move>
inline void kquant_pieces(DType t, int i, Move move) {
  if (t == DType::Q6_K) q6k_pieces(i, move);
  else q45k_pieces(t == DType::Q5_K, i, move);
}

// Row i's plain super-block from the group-block `g` of a Q4_K / Q5_K / Q6_K matrix.
inline void kquant_block_from_group(DType t, const uint8_t* g, int i, uint8_t* out) {
  kquant_pieces(t, i, [&](int plain, int group, int n) { __builtin_memcpy(out + plain, g + group, n); });
}

// The group-block of 16 plain super-blocks of a Q4_K / Q5_K / Q6_K matrix, blocks[i] for row i.
inline void kquant_group_from_blocks(DType t, const uint8_t* const blocks[kKQuantGroupRows], uint8_t* g) {
  for (int i = 0; i < kKQuantGroupRows; ++i)
    kquant_pieces(t, i, [&](int plain, int group, int n) { __builtin_memcpy(g + group, blocks[i] + plain, n); });
}

// Row r's super-block b of an interleaved Q4_K / Q5_K / Q6_K matrix of num_blocks super-blocks per row, as a
// plain block of `bytes` bytes.
inline void kquant_interleaved_block(DType t, const uint8_t* w, int64_t num_blocks, int bytes, int64_t r,
                                     int64_t b, uint8_t* out) {
  const int64_t g = r / kKQuantGroupRows;
  kquant_block_from_group(t, w + (g * num_blocks + b) * kKQuantGroupRows * bytes, int(r % kKQuantGroupRows), out);
}

}  // namespace
}  // namespace inflight::kernels::cpu

// The interleaved layout of Q4_K matrices (kernels/matmul.h): 16 rows per group, and per group and
// 256-column super-block the 16 rows' super-blocks rearranged so that one 512-bit load holds one 4-column
// quad of all 16 rows for two chunks of 32 (matmul_avx512_vnni.cpp). The same bytes as the 16 plain blocks:
//   [0, 32)             the 16 f16 scales d, row i at 2i
//   [32, 64)            the 16 f16 scales dmin, row i at 32 + 2i
//   [64, 256)           the packed 6-bit scales and mins: 3 words of 64 bytes, word j's bytes 4i .. 4i + 3 =
//                       bytes 4j .. 4j + 3 of row i's 12
//   then 32 x 64 bytes  the nibbles: vector 4q + h, bytes 4i .. 4i + 3 = bytes 32h + 4q .. 32h + 4q + 3 of row
//                       i's qs, so their low nibbles are columns 4q + k of chunk 2h, their high nibbles those
//                       of chunk 2h + 1 (quad-major: the kernel reads the vectors in order)
// A plain block is d, dmin (f16), the 12 scale bytes (kquant_scale_min), then qs (128 bytes: byte 32h + j
// holds column j of chunk 2h in its low nibble and of chunk 2h + 1 in its high one), as GGUF stores them.
//
// NOTE: anonymous namespace: included by the per-ISA files (see matmul_kernels.h).
#pragma once
#include <cstdint>

namespace inflight::kernels::cpu {
namespace {

constexpr int64_t kKQuantGroupRows = 16;
constexpr int kQ4KBytes = 144;  // one plain Q4_K super-block
// Where a group-block's dmin, scale words and nibble vectors start.
constexpr int kQ4KMinsAt = 32, kQ4KScalesAt = 64, kQ4KNibblesAt = 256;

// Row i's plain super-block from the group-block `g`.
inline void q4k_block_from_group(const uint8_t* g, int i, uint8_t* out) {
  __builtin_memcpy(out, g + 2 * i, 2);
  __builtin_memcpy(out + 2, g + kQ4KMinsAt + 2 * i, 2);
  for (int j = 0; j < 3; ++j) __builtin_memcpy(out + 4 + 4 * j, g + kQ4KScalesAt + 64 * j + 4 * i, 4);
  for (int h = 0; h < 4; ++h)
    for (int q = 0; q < 8; ++q) __builtin_memcpy(out + 16 + 32 * h + 4 * q, g + kQ4KNibblesAt + 64 * (4 * q + h) + 4 * i, 4);
}

// The group-block of 16 plain super-blocks, blocks[i] for row i.
inline void q4k_group_from_blocks(const uint8_t* const blocks[kKQuantGroupRows], uint8_t* g) {
  for (int i = 0; i < kKQuantGroupRows; ++i) {
    const uint8_t* b = blocks[i];
    __builtin_memcpy(g + 2 * i, b, 2);
    __builtin_memcpy(g + kQ4KMinsAt + 2 * i, b + 2, 2);
    for (int j = 0; j < 3; ++j) __builtin_memcpy(g + kQ4KScalesAt + 64 * j + 4 * i, b + 4 + 4 * j, 4);
    for (int h = 0; h < 4; ++h)
      for (int q = 0; q < 8; ++q) __builtin_memcpy(g + kQ4KNibblesAt + 64 * (4 * q + h) + 4 * i, b + 16 + 32 * h + 4 * q, 4);
  }
}

// Row r's super-block b of an interleaved matrix of num_blocks super-blocks per row, as a plain block.
inline void q4k_interleaved_block(const uint8_t* w, int64_t num_blocks, int64_t r, int64_t b, uint8_t* out) {
  const int64_t g = r / kKQuantGroupRows;
  q4k_block_from_group(w + (g * num_blocks + b) * kKQuantGroupRows * kQ4KBytes, int(r % kKQuantGroupRows), out);
}

}  // namespace
}  // namespace inflight::kernels::cpu

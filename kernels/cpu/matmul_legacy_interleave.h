// The interleaved layout of Q4_0 and Q5_0 matrices (kernels/matmul.h): 16 rows per group, and per group and
// 32-column block the 16 rows' blocks rearranged so that one 512-bit load holds one 4-column quad of all 16
// rows, as vpdpbusd multiplies them (matmul_avx512_vnni.cpp). The same bytes as the 16 plain blocks:
//   [0, 32)            the 16 f16 scales, row i at 2i
//   Q5_0: [32, 96)     8 64-bit masks of the fifth bits: mask q, bit 4i + k = bit 4q + k of row i's qh
//   then 4 x 64 bytes  the nibbles: chunk c, bytes 4i .. 4i + 3 = bytes 4c .. 4c + 3 of row i's qs, so their
//                      low nibbles are columns 4c + k and their high nibbles columns 16 + 4c + k
// A plain block is d (f16), for Q5_0 qh (32 bits, bit j: column j's fifth bit), then qs (16 bytes: byte j
// holds column j in its low nibble and column j + 16 in its high one), as GGUF stores them.
//
// NOTE: anonymous namespace: included by the per-ISA files (see matmul_kernels.h).
#pragma once
#include <cstdint>

namespace inflight::kernels::cpu {
namespace {

constexpr int64_t kLegacyGroupRows = 16;

// Bytes of one plain block: 18 (Q4_0) or 22 (Q5_0).
constexpr int legacy_plain_bytes(bool five) { return five ? 22 : 18; }
// Where a group-block's fifth-bit masks (Q5_0) and nibble chunks start.
constexpr int kLegacyMasksAt = 32;
constexpr int legacy_nibbles_at(bool five) { return five ? 96 : 32; }

// Row i's plain block from the group-block `g`.
inline void legacy_block_from_group(const uint8_t* g, bool five, int i, uint8_t* out) {
  out[0] = g[2 * i];
  out[1] = g[2 * i + 1];
  const uint8_t* qs = g + legacy_nibbles_at(five);
  uint8_t* to = out + (five ? 6 : 2);
  for (int c = 0; c < 4; ++c) __builtin_memcpy(to + 4 * c, qs + 64 * c + 4 * i, 4);
  if (!five) return;
  uint32_t qh = 0;
  for (int q = 0; q < 8; ++q) {
    uint64_t mask;
    __builtin_memcpy(&mask, g + kLegacyMasksAt + 8 * q, 8);
    qh |= uint32_t((mask >> (4 * i)) & 0xf) << (4 * q);
  }
  __builtin_memcpy(out + 2, &qh, 4);
}

// The group-block of 16 plain blocks, blocks[i] for row i.
inline void legacy_group_from_blocks(const uint8_t* const blocks[kLegacyGroupRows], bool five, uint8_t* g) {
  uint8_t* qs = g + legacy_nibbles_at(five);
  uint64_t masks[8] = {};
  for (int i = 0; i < kLegacyGroupRows; ++i) {
    const uint8_t* b = blocks[i];
    g[2 * i] = b[0];
    g[2 * i + 1] = b[1];
    for (int c = 0; c < 4; ++c) __builtin_memcpy(qs + 64 * c + 4 * i, b + (five ? 6 : 2) + 4 * c, 4);
    if (!five) continue;
    uint32_t qh;
    __builtin_memcpy(&qh, b + 2, 4);
    for (int q = 0; q < 8; ++q) masks[q] |= uint64_t((qh >> (4 * q)) & 0xf) << (4 * i);
  }
  if (five) __builtin_memcpy(g + kLegacyMasksAt, masks, sizeof(masks));
}

// Row r's block b of an interleaved matrix of num_blocks blocks per row, as a plain block.
inline void legacy_interleaved_block(const uint8_t* w, int64_t num_blocks, bool five, int64_t r, int64_t b,
                                     uint8_t* out) {
  const int64_t g = r / kLegacyGroupRows;
  const uint8_t* gb = w + (g * num_blocks + b) * kLegacyGroupRows * legacy_plain_bytes(five);
  legacy_block_from_group(gb, five, int(r % kLegacyGroupRows), out);
}

}  // namespace
}  // namespace inflight::kernels::cpu

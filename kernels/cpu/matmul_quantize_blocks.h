// The loop over one row's activation blocks shared by the SIMD quantisers (quantize_activations_avx2 /
// _avx512): each ISA file passes its own block functions, with the contract of quantize_activations
// (matmul_kernels.h).
//
// NOTE: deliberately in an anonymous namespace: each ISA file gets its own copy compiled with its own -m
// flags and nothing with external linkage escapes (see matmul_kernels.h).
#pragma once
#include <cstdint>

namespace inflight::kernels::cpu {
namespace {

// Block32(xb, qb, d, m, o, c, s): a Q8_0 / Q8_1 block with its optional o lanes, c and sums over each 16;
// Block256(xb, qb, d, s): a Q8_K block with its sums over each 16.
template <auto Block32, auto Block256>
void quantize_blocks(const float* x, int64_t n, int block, int8_t* q, float* d, int16_t* s, float* m, int32_t* o,
                     int32_t* c) {
  for (int64_t b = 0; b < n / block; ++b) {
    if (block == 256) {
      Block256(x + b * 256, q + b * 256, d + b, s ? s + b * 16 : nullptr);
    } else {
      Block32(x + b * 32, q + b * 32, d + b, m + b, o ? o + b * 8 : nullptr, c ? c + b : nullptr,
              s ? s + b * 2 : nullptr);
    }
  }
}

}  // namespace
}  // namespace inflight::kernels::cpu

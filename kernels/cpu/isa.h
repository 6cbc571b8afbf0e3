// Run-time choice of the SIMD instruction set the CPU kernels use. One binary carries a scalar, an
// AVX2+FMA+F16C, an AVX-512 (F/BW/VL/DQ), an AVX-512 VNNI and an AVX-512 BF16 version of the hot kernels
// (VNNI adds integer dot products: Q8_0 matmuls, int8 KV attention; BF16 with VBMI adds bf16 dot products:
// fp8 KV attention); active_isa() picks one.
#pragma once
#include <cstdint>
#include <string_view>

namespace inflight::kernels::cpu {

// Ordered: a larger value implies the smaller ones are supported too. Dispatch with >= (e.g.
// `isa >= Isa::Avx512` picks the AVX-512 kernel also under Avx512Vnni, which only adds int8 dot products).
// Avx512Bf16: Avx512Vnni plus AVX512_BF16 and AVX512_VBMI (Zen 4, Sapphire Rapids).
enum class Isa : uint8_t { Scalar, Avx2, Avx512, Avx512Vnni, Avx512Bf16 };

std::string_view isa_name(Isa isa);
// Parses "scalar" / "avx2" / "avx512" / "avx512vnni" / "avx512bf16"; returns false for anything else.
bool parse_isa(std::string_view s, Isa* out);

// The best ISA this CPU (and OS: XSAVE state) supports.
Isa detected_isa();
bool isa_supported(Isa isa);

// The ISA kernels use now. First use reads env INFLIGHT_ISA (scalar|avx2|avx512|avx512vnni|avx512bf16); a request the CPU
// cannot run falls back to detected_isa(). Default: detected_isa().
Isa active_isa();
// Overrides active_isa() (tests, benchmarks). Returns false, changing nothing, when unsupported.
// Must not be called while kernels run on other threads.
bool set_active_isa(Isa isa);

// Whether a streaming kernel's software prefetches should fill L2 rather than L1 (MatmulArgs::stream_to_l2):
// true on Intel CPUs, whose L1 fill buffers cap the lines in flight (see kernels/cpu/matmul_tiling.h).
bool stream_prefetch_to_l2();

// Whether the AVX-512 F16 / BF16 interleaved prefill runs 16-row x 24-token half tiles (MatmulArgs::half_tiles):
// true on Intel CPUs, whose widening takes FMA-port uops; elsewhere 32 x 12 tiles that prefetch ahead into L1
// (see HalfGroupKernel in kernels/cpu/matmul_avx512.cpp). Both give the same bits.
bool prefill_half_tiles();
// Overrides prefill_half_tiles() (tests, benchmarks). Must not be called while kernels run on other threads.
void set_prefill_half_tiles(bool on);

}  // namespace inflight::kernels::cpu

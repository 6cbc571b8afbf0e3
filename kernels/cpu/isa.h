// Run-time choice of the SIMD instruction set the CPU kernels use. One binary carries a scalar, an
// AVX2+FMA+F16C and an AVX-512 (F/BW/VL/DQ) version of each hot kernel; active_isa() picks one.
#pragma once
#include <cstdint>
#include <string_view>

namespace inflight::kernels::cpu {

// Ordered: a larger value implies the smaller ones are supported too.
enum class Isa : uint8_t { Scalar, Avx2, Avx512 };

std::string_view isa_name(Isa isa);
// Parses "scalar" / "avx2" / "avx512"; returns false for anything else.
bool parse_isa(std::string_view s, Isa* out);

// The best ISA this CPU (and OS: XSAVE state) supports.
Isa detected_isa();
bool isa_supported(Isa isa);
// True when the CPU has AVX-512 VNNI (int8 dot products); only meaningful when Avx512 is supported.
bool has_avx512_vnni();

// The ISA kernels use now. First use reads env INFLIGHT_ISA (scalar|avx2|avx512); a request the CPU
// cannot run falls back to detected_isa(). Default: detected_isa().
Isa active_isa();
// Overrides active_isa() (tests, benchmarks). Returns false, changing nothing, when unsupported.
// Must not be called while kernels run on other threads.
bool set_active_isa(Isa isa);

}  // namespace inflight::kernels::cpu

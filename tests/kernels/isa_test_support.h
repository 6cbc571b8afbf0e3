// The CPU ISAs a kernel test sweeps: which ones this CPU runs, and restoring the active one afterwards.
#pragma once
#include <doctest/doctest.h>

#include <vector>

#include "kernels/cpu/isa.h"

namespace inflight::test {

// Every ISA this CPU runs, scalar first; says which ones it skips.
inline std::vector<kernels::cpu::Isa> supported_isas() {
  std::vector<kernels::cpu::Isa> out;
  for (kernels::cpu::Isa isa : {kernels::cpu::Isa::Scalar, kernels::cpu::Isa::Avx2, kernels::cpu::Isa::Avx512,
                                kernels::cpu::Isa::Avx512Vnni, kernels::cpu::Isa::Avx512Bf16}) {
    if (kernels::cpu::isa_supported(isa)) out.push_back(isa);
    else MESSAGE("skipping ISA " << kernels::cpu::isa_name(isa) << ": this CPU lacks it");
  }
  return out;
}

// Restores the active ISA at scope exit.
struct IsaGuard {
  kernels::cpu::Isa saved = kernels::cpu::active_isa();
  ~IsaGuard() { kernels::cpu::set_active_isa(saved); }
};

// Restores kernels::cpu::prefill_half_tiles() at scope exit.
struct HalfTilesGuard {
  bool saved = kernels::cpu::prefill_half_tiles();
  ~HalfTilesGuard() { kernels::cpu::set_prefill_half_tiles(saved); }
};

}  // namespace inflight::test

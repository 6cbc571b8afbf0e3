#include "kernels/cpu/isa.h"

#include <cpuid.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace inflight::kernels::cpu {
namespace {

// F16C from CPUID leaf 1 (clang 14's __builtin_cpu_supports does not know "f16c"). Its OS-enabled state
// is AVX's, which the AVX2 / AVX-512 checks it is combined with already require.
bool has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0;
}

Isa detect() {
  __builtin_cpu_init();
  // __builtin_cpu_supports checks the OS-enabled state (XCR0) as well as CPUID on GCC >= 11.
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("fma") && has_f16c();
  if (avx512 && __builtin_cpu_supports("avx512vnni")) {
    const bool bf16 = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512vbmi");
    return bf16 ? Isa::Avx512Bf16 : Isa::Avx512Vnni;
  }
  if (avx512) return Isa::Avx512;
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    has_f16c();
  return avx2 ? Isa::Avx2 : Isa::Scalar;
}

Isa initial_isa() {
  const Isa best = detected_isa();
  const char* env = std::getenv("INFLIGHT_ISA");
  if (env == nullptr || *env == '\0') return best;
  Isa wanted;
  if (!parse_isa(env, &wanted)) {
    std::fprintf(stderr, "inflight: ignoring unknown INFLIGHT_ISA=%s (scalar|avx2|avx512|avx512vnni|avx512bf16)\n", env);
    return best;
  }
  if (!isa_supported(wanted)) {
    std::fprintf(stderr, "inflight: INFLIGHT_ISA=%s not supported by this CPU, using %s\n", env,
                 isa_name(best).data());
    return best;
  }
  return wanted;
}

std::atomic<Isa>& active() {
  static std::atomic<Isa> isa{initial_isa()};
  return isa;
}

}  // namespace

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
    case Isa::Avx512Vnni: return "avx512vnni";
    case Isa::Avx512Bf16: return "avx512bf16";
  }
  return "?";
}

bool parse_isa(std::string_view s, Isa* out) {
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni, Isa::Avx512Bf16}) {
    if (s == isa_name(isa)) {
      *out = isa;
      return true;
    }
  }
  return false;
}

Isa detected_isa() {
  static const Isa isa = detect();
  return isa;
}

bool isa_supported(Isa isa) { return isa <= detected_isa(); }

Isa active_isa() { return active().load(std::memory_order_relaxed); }

bool set_active_isa(Isa isa) {
  if (!isa_supported(isa)) return false;
  active().store(isa, std::memory_order_relaxed);
  return true;
}

namespace {

// The vendor whose cores the Intel-measured choices below (stream_prefetch_to_l2, prefill_half_tiles) follow.
bool is_intel() {
  static const bool intel = [] {
    __builtin_cpu_init();
    return __builtin_cpu_is("intel") != 0;
  }();
  return intel;
}

std::atomic<bool>& half_tiles() {
  static std::atomic<bool> on{is_intel()};
  return on;
}

}  // namespace

bool stream_prefetch_to_l2() { return is_intel(); }

bool prefill_half_tiles() { return half_tiles().load(std::memory_order_relaxed); }

void set_prefill_half_tiles(bool on) { half_tiles().store(on, std::memory_order_relaxed); }

}  // namespace inflight::kernels::cpu

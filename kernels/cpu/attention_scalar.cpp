// The scalar tile routine: always compiled, one "lane" per vector. Defines the semantics the SIMD
// versions reproduce (up to summation order).
#include <cstring>

#include "kernels/cpu/attention_tile_impl.h"

namespace inflight::kernels::cpu {
namespace {

struct Scalar {
  static constexpr int W = 1;
  static constexpr int kMaxQB = 1;       // queries per score / weight block
  static constexpr int kAccBudget = 8;   // accumulators of a weight block
  using V = float;
  static V zero() { return 0.0f; }
  static V set1(float x) { return x; }
  static V load(const float* p) { return *p; }
  static void store(float* p, V v) { *p = v; }
  static V add(V a, V b) { return a + b; }
  static V mul(V a, V b) { return a * b; }
  static V fmadd(V a, V b, V c) { return a * b + c; }
  static V max(V a, V b) { return a > b ? a : b; }
  static float hsum(V v) { return v; }
  static float hmax(V v) { return v; }
  static V transpose_sum(const V* acc) { return acc[0]; }
  template <int KB>
  static void store_lanes(float* dst, V v, int) { *dst = v; }
  static V exp(V x) { return x < -87.3f ? 0.0f : __builtin_expf(x); }
  static V widen_f32(const uint8_t* p) {
    float x;
    std::memcpy(&x, p, 4);
    return x;
  }
  static V widen_f16(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return f16_to_f32(h);
  }
  static V widen_bf16(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return bf16_to_f32(h);
  }
  static V widen_i8(const uint8_t* p) { return float(int8_t(*p)); }
  static V widen_e4m3(const uint8_t* p) { return f16_to_f32(fp8_e4m3_to_f16_bits(*p)); }
  static V widen_e5m2(const uint8_t* p) { return fp8_e5m2_to_f32(*p); }
};

}  // namespace

void attend_tile_scalar(const TileArgs& a) { TileKernel<Scalar>::attend(a); }
void merge_state_scalar(SoftmaxState& a, const SoftmaxState& b, int dim) { TileKernel<Scalar>::merge(a, b, dim); }

}  // namespace inflight::kernels::cpu

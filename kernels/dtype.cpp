#include "kernels/dtype.h"

#include <algorithm>
#include <cmath>

namespace inflight::kernels {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::Q8_0: return "q8_0";
  }
  return "?";
}

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  switch (t) {
    case DType::F32: {
      std::memcpy(dst, src, size_t(n) * sizeof(float));
      return;
    }
    case DType::F16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(h[i]);
      return;
    }
    case DType::BF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(h[i]);
      return;
    }
    case DType::Q8_0: {
      const auto* block = static_cast<const uint8_t*>(src);
      for (int64_t b = 0; b < n / kQ8BlockSize; ++b, block += kQ8BlockBytes) {
        uint16_t d16;
        std::memcpy(&d16, block, 2);
        const float d = f16_to_f32(d16);
        const auto* q = reinterpret_cast<const int8_t*>(block + 2);
        for (int i = 0; i < kQ8BlockSize; ++i) dst[b * kQ8BlockSize + i] = d * float(q[i]);
      }
      return;
    }
  }
}

void quantize_row_q8_0(const float* src, void* dst, int64_t n) {
  auto* block = static_cast<uint8_t*>(dst);
  for (int64_t b = 0; b < n / kQ8BlockSize; ++b, block += kQ8BlockBytes) {
    const float* x = src + b * kQ8BlockSize;
    float amax = 0.0f;
    for (int i = 0; i < kQ8BlockSize; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.0f;
    const float inv = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t d16 = f32_to_f16(d);
    std::memcpy(block, &d16, 2);
    for (int i = 0; i < kQ8BlockSize; ++i) block[2 + i] = uint8_t(int8_t(std::lround(x[i] * inv)));
  }
}

}  // namespace inflight::kernels

// KV cache storage types. The one place that says how a K/V value is stored and read back: the append
// path, every attention backend and the tests all call these.
#pragma once
#include <cstdint>
#include <string_view>

#include "kernels/dtype.h"

namespace inflight::kernels {

enum class KvDType : uint8_t { F32, F16 };

inline int kv_elem_bytes(KvDType t) { return t == KvDType::F32 ? 4 : 2; }

std::string_view kv_dtype_name(KvDType t);
// Parses "f32"/"fp32"/"float32", "f16"/"fp16"/"float16"; returns false for anything else.
bool parse_kv_dtype(std::string_view s, KvDType* out);

inline void kv_store(KvDType t, void* base, int64_t i, float v) {
  if (t == KvDType::F32) static_cast<float*>(base)[i] = v;
  else static_cast<uint16_t*>(base)[i] = f32_to_f16(v);
}

inline float kv_load(KvDType t, const void* base, int64_t i) {
  if (t == KvDType::F32) return static_cast<const float*>(base)[i];
  return f16_to_f32(static_cast<const uint16_t*>(base)[i]);
}

}  // namespace inflight::kernels

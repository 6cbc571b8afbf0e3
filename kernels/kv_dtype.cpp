#include "kernels/kv_dtype.h"

namespace inflight::kernels {

std::string_view kv_dtype_name(KvDType t) {
  switch (t) {
    case KvDType::F32: return "f32";
    case KvDType::F16: return "f16";
  }
  return "?";
}

bool parse_kv_dtype(std::string_view s, KvDType* out) {
  if (s == "f32" || s == "fp32" || s == "float32" || s == "auto") {
    *out = KvDType::F32;
    return true;
  }
  if (s == "f16" || s == "fp16" || s == "float16" || s == "half") {
    *out = KvDType::F16;
    return true;
  }
  return false;
}

}  // namespace inflight::kernels

#include "kernels/kv_dtype.h"

#include <string>

namespace inflight::kernels {

std::string_view kv_dtype_name(KvDType t) {
  switch (t) {
    case KvDType::F32: return "f32";
    case KvDType::F16: return "f16";
    case KvDType::BF16: return "bf16";
    case KvDType::Int8: return "int8";
    case KvDType::Int8Static: return "int8-static";
    case KvDType::Fp8E4M3: return "fp8-e4m3";
    case KvDType::Fp8E5M2: return "fp8-e5m2";
  }
  return "?";
}

const uint8_t* fp8_bf16_table(bool e5m2) {
  struct Table {
    alignas(64) uint8_t bytes[256];
    explicit Table(bool e5m2) {
      for (int c = 0; c < 128; ++c) {
        const uint16_t b = fp8_to_bf16_bits(e5m2, uint8_t(c));
        bytes[c] = uint8_t(b >> 8);
        bytes[128 + c] = uint8_t(b & 0xff);
      }
    }
  };
  static const Table e4m3(false), e5m2_table(true);
  return e5m2 ? e5m2_table.bytes : e4m3.bytes;
}

std::string_view kv_dtype_names() { return "f32, f16, bf16, int8, int8-static, fp8-e4m3 (fp8), fp8-e5m2"; }

bool parse_kv_dtype(std::string_view s, KvDType* out) {
  std::string name(s);
  for (char& c : name) c = c == '_' ? '-' : c;
  struct Alias {
    std::string_view name;
    KvDType dtype;
  };
  static constexpr Alias kAliases[] = {
      {"f32", KvDType::F32},          {"fp32", KvDType::F32},          {"float32", KvDType::F32},
      {"auto", KvDType::F32},         {"f16", KvDType::F16},           {"fp16", KvDType::F16},
      {"float16", KvDType::F16},      {"half", KvDType::F16},          {"bf16", KvDType::BF16},
      {"bfloat16", KvDType::BF16},    {"int8", KvDType::Int8},         {"int8-static", KvDType::Int8Static},
      {"fp8", KvDType::Fp8E4M3},      {"fp8-e4m3", KvDType::Fp8E4M3},  {"e4m3", KvDType::Fp8E4M3},
      {"fp8-e5m2", KvDType::Fp8E5M2}, {"e5m2", KvDType::Fp8E5M2},
  };
  for (const Alias& a : kAliases) {
    if (name == a.name) {
      *out = a.dtype;
      return true;
    }
  }
  return false;
}

}  // namespace inflight::kernels

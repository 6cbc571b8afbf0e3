#include "engine/weight_types.h"

#include <cstdio>
#include <stdexcept>

namespace inflight::engine {

namespace {

using kernels::DType;

// llama.cpp's rule for the layers that get more bits in the _M mixes: the first and last eighth, and
// every third layer in between.
bool more_bits_layer(int layer, int num_layers) {
  return layer < num_layers / 8 || layer >= 7 * num_layers / 8 || (layer - num_layers / 8) % 3 == 2;
}

// Layer index of "blk.<i>.<part>", or -1.
int layer_of(const std::string& tensor) {
  int layer = -1;
  if (std::sscanf(tensor.c_str(), "blk.%d.", &layer) != 1) return -1;
  return layer;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

DType fallback_32(DType t) {
  switch (t) {
    case DType::Q4_K: return DType::Q5_0;
    case DType::Q5_K: return DType::Q5_1;
    case DType::Q6_K: return DType::Q8_0;
    default: return t;
  }
}

}  // namespace

WeightTypes::WeightTypes(Mix m) : base(m == Mix::Q5_K_M ? DType::Q5_K : DType::Q4_K), mix(m) {}

std::string WeightTypes::name() const {
  switch (mix) {
    case Mix::Q4_K_M: return "q4_k_m";
    case Mix::Q5_K_M: return "q5_k_m";
    case Mix::None: break;
  }
  return std::string(kernels::dtype_name(base));
}

uint64_t WeightTypes::file_type() const {
  if (mix == Mix::Q4_K_M) return 15;
  if (mix == Mix::Q5_K_M) return 17;
  switch (base) {
    case DType::F32: return 0;   // ALL_F32
    case DType::F16: return 1;   // MOSTLY_F16
    case DType::Q4_0: return 2;
    case DType::Q4_1: return 3;
    case DType::Q8_0: return 7;
    case DType::Q5_0: return 8;
    case DType::Q5_1: return 9;
    case DType::Q4_K: return 14;  // MOSTLY_Q4_K_S, the nearest
    case DType::Q5_K: return 16;  // MOSTLY_Q5_K_S
    case DType::Q6_K: return 18;
    case DType::BF16: return 32;
  }
  return 0;
}

DType WeightTypes::matrix_dtype(const std::string& tensor, int num_layers, int64_t cols) const {
  DType t = base;
  if (tensor == "token_embd.weight" && embedding) {
    t = *embedding;
  } else if (mix != Mix::None) {
    const int layer = layer_of(tensor);
    if (tensor == "output.weight") t = DType::Q6_K;
    else if ((ends_with(tensor, ".attn_v.weight") || ends_with(tensor, ".ffn_down.weight")) && layer >= 0 &&
             more_bits_layer(layer, num_layers))
      t = DType::Q6_K;
    if (cols % kernels::kQkBlockSize != 0) t = fallback_32(t);
  }
  if (cols % kernels::block_size(t) != 0)
    throw std::invalid_argument("--dtype " + name() + ": tensor " + tensor + " has " + std::to_string(cols) +
                                " columns, not a multiple of the " + std::string(kernels::dtype_name(t)) +
                                " block size " + std::to_string(kernels::block_size(t)));
  return t;
}

std::optional<DType> parse_single_dtype(const std::string& s) {
  static const std::pair<const char*, DType> dtypes[] = {
      {"f32", DType::F32},   {"f16", DType::F16},   {"bf16", DType::BF16}, {"q8_0", DType::Q8_0},
      {"q4_0", DType::Q4_0}, {"q4_1", DType::Q4_1}, {"q5_0", DType::Q5_0}, {"q5_1", DType::Q5_1},
      {"q4_k", DType::Q4_K}, {"q5_k", DType::Q5_K}, {"q6_k", DType::Q6_K}};
  for (const auto& [name, dtype] : dtypes)
    if (s == name) return dtype;
  return std::nullopt;
}

WeightTypes parse_weight_types(const std::string& s) {
  if (const auto dtype = parse_single_dtype(s)) return WeightTypes(*dtype);
  if (s == "q4_k_m") return WeightTypes(WeightTypes::Mix::Q4_K_M);
  if (s == "q5_k_m") return WeightTypes(WeightTypes::Mix::Q5_K_M);
  throw std::invalid_argument("--dtype: unknown weight dtype '" + s +
                              "' (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k, q4_k_m, q5_k_m)");
}

}  // namespace inflight::engine

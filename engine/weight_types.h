// The weight types a written model uses: one dtype for every matrix, or a K-quant mix in the manner of
// llama.cpp's Q4_K_M / Q5_K_M (which tensors get the higher type: weight_types.cpp).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "kernels/dtype.h"

namespace inflight::engine {

struct WeightTypes {
  enum class Mix : uint8_t { None, Q4_K_M, Q5_K_M };
  kernels::DType base = kernels::DType::F32;  // Q4_K / Q5_K for the mixes
  Mix mix = Mix::None;
  // token_embd.weight's type when set (llama-quantize's --token-embedding-type), else as the others.
  std::optional<kernels::DType> embedding;

  WeightTypes(kernels::DType dtype) : base(dtype) {}  // NOLINT: one dtype converts implicitly
  explicit WeightTypes(Mix m);

  // "q4_k_m", "q5_k_m" or the dtype's name.
  std::string name() const;
  // llama.cpp's general.file_type (llama_ftype).
  uint64_t file_type() const;
  // The dtype of matrix `tensor` (GGUF name: "token_embd.weight", "blk.3.ffn_down.weight", "output.weight")
  // with `cols` input features in a model of `num_layers` layers. A mix falls back, as llama.cpp does,
  // to a 32-block type where cols is not a multiple of 256 (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0).
  // Throws std::invalid_argument where the chosen type's block size does not divide cols.
  kernels::DType matrix_dtype(const std::string& tensor, int num_layers, int64_t cols) const;
};

// Parses a --dtype value: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k, q4_k_m, q5_k_m.
// Throws std::invalid_argument naming the accepted values.
WeightTypes parse_weight_types(const std::string& s);
// One of the single types above (no mix); nullopt otherwise.
std::optional<kernels::DType> parse_single_dtype(const std::string& s);

}  // namespace inflight::engine

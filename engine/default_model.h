// The built-in default model: stories260K (llama2.c's tinyllamas, MIT; engine/default_model/LICENSE),
// a trained 260K-parameter Llama 2 model that writes short English stories, embedded in the executable
// at build time so that `inflight serve` and `inflight generate` run with no --model.
#pragma once
#include <cstdint>
#include <span>

namespace inflight::engine {

inline constexpr const char* kDefaultModelName = "stories260K";

// The GGUF image of engine/default_model/stories260K.gguf, in the executable's read-only data.
std::span<const uint8_t> default_model_gguf();

}  // namespace inflight::engine

// Loads a model (weights + tokenizer) from a GGUF file, a Hugging Face folder, or the built-in default.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/tokenizer.h"
#include "engine/weights.h"

namespace inflight::engine {

struct LoadedModel {
  ModelWeights weights;
  Tokenizer tokenizer;
  // The model's Jinja chat template: GGUF tokenizer.chat_template, or a Hugging Face folder's
  // chat_template.jinja, else its tokenizer_config.json "chat_template"; empty when absent.
  std::string chat_template;
};

// `path` is a .gguf file (GGUF/Meta RoPE layout: adjacent pairs) or a folder with config.json,
// model.safetensors or sharded *.safetensors + model.safetensors.index.json, and tokenizer.json (with
// tokenizer_config.json) or tokenizer.model (HF layout: rotate-half RoPE). Throws LoadError naming the file and the tensor/key at fault.
LoadedModel load_model(const std::string& path);

// The tokenizer alone: a Hugging Face folder (tokenizer.json or tokenizer.model), a tokenizer.json or
// tokenizer.model file, or a .gguf file's vocabulary. Throws LoadError.
Tokenizer load_tokenizer(const std::string& path);

// A GGUF file's bytes already in memory (tests, fuzzing); `name` stands for the path in errors.
LoadedModel load_gguf_model(std::shared_ptr<const std::vector<uint8_t>> bytes, const std::string& name);

// The built-in default model: stories260K, trained, embedded in the executable (see default_model.h).
LoadedModel load_builtin_model();

}  // namespace inflight::engine

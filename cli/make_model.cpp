// `inflight make-model`: writes a random-weight Llama model of a preset or custom shape (benchmarks), as
// GGUF with a synthetic sentencepiece vocabulary, or with the vocabulary of a real tokenizer.json
// (--tokenizer) as a Hugging Face folder or a GGUF with a gpt2 vocabulary.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/builtin_model.h"
#include "engine/model_loader.h"
#include "cli/commands.h"

namespace inflight::cli {

namespace {

struct MakeModelFlags {
  std::string preset = "tiny";
  std::string dtype = "f16";
  std::string embedding_dtype;  // "" = as --dtype
  std::string out;
  std::string tokenizer;  // folder with tokenizer.json + tokenizer_config.json
  std::string format;     // "gguf" or "hf"; default: hf with --tokenizer, else gguf
  uint64_t seed = 0;
  engine::ModelShape overrides;  // zero fields keep the preset's value
};

// The chat template of a tokenizer folder: chat_template.jinja, else tokenizer_config.json "chat_template"
// (a string, or a list of {name, template} whose "default" one is used); "" for none.
std::string folder_chat_template(const std::filesystem::path& dir) {
  if (std::ifstream jinja(dir / "chat_template.jinja", std::ios::binary); jinja)
    return std::string(std::istreambuf_iterator<char>(jinja), std::istreambuf_iterator<char>());
  std::ifstream in(dir / "tokenizer_config.json", std::ios::binary);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("chat_template")) return {};
  const nlohmann::json& t = j["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array())
    for (const nlohmann::json& item : t)
      if (item.is_object() && item.value("name", "") == "default" && item.contains("template") && item["template"].is_string())
        return item["template"].get<std::string>();
  return {};
}

void run_make_model(const MakeModelFlags& f) {
  const engine::ModelShape* preset = engine::find_preset(f.preset);
  if (!preset) {
    std::string names;
    for (const auto& p : engine::model_presets()) names += (names.empty() ? "" : ", ") + p.name;
    throw std::invalid_argument("--preset: unknown preset '" + f.preset + "' (" + names + ")");
  }
  engine::ModelShape shape = *preset;
  const engine::ModelShape& o = f.overrides;
  for (auto [dst, src] : {std::pair{&shape.dim, o.dim}, {&shape.num_layers, o.num_layers},
                          {&shape.num_q_heads, o.num_q_heads}, {&shape.num_kv_heads, o.num_kv_heads},
                          {&shape.ffn_dim, o.ffn_dim}, {&shape.vocab_size, o.vocab_size},
                          {&shape.max_seq_len, o.max_seq_len}})
    if (src > 0) *dst = src;
  engine::WeightTypes dtype = engine::parse_weight_types(f.dtype);
  if (!f.embedding_dtype.empty()) {
    dtype.embedding = engine::parse_single_dtype(f.embedding_dtype);
    if (!dtype.embedding)
      throw std::invalid_argument("--embedding-dtype: unknown weight dtype '" + f.embedding_dtype +
                                  "' (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k)");
  }
  const std::string format = f.format.empty() ? (f.tokenizer.empty() ? "gguf" : "hf") : f.format;
  if (format != "gguf" && format != "hf") throw std::invalid_argument("--format: unknown format '" + format + "' (gguf, hf)");
  if (format == "hf" && f.tokenizer.empty())
    throw std::invalid_argument("--format hf needs --tokenizer DIR (a folder with tokenizer.json)");
  std::string vocab_note = "synthetic sentencepiece vocabulary";
  if (f.tokenizer.empty()) {
    const std::string out = f.out.empty() ? shape.name + "-" + f.dtype + ".gguf" : f.out;
    engine::write_random_model(out, shape, dtype, f.seed);
    std::printf("wrote %s: %s shape (%s), %s weights (random), dim %d, %d layers, %d/%d heads, ffn %d, vocab %d (%s)\n",
                out.c_str(), shape.name.c_str(), shape.architecture.c_str(), f.dtype.c_str(), shape.dim, shape.num_layers, shape.num_q_heads,
                shape.num_kv_heads, shape.ffn_dim, shape.vocab_size, vocab_note.c_str());
    return;
  }
  const std::filesystem::path dir(f.tokenizer);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(dir / "tokenizer.json", ec))
    throw std::invalid_argument("--tokenizer " + f.tokenizer + ": no tokenizer.json in that folder");
  const engine::Tokenizer tokenizer = engine::load_tokenizer(f.tokenizer);
  if (o.vocab_size > 0 && o.vocab_size < tokenizer.vocab_size())
    throw std::invalid_argument("--vocab " + std::to_string(o.vocab_size) + " is smaller than the tokenizer's " +
                                std::to_string(tokenizer.vocab_size()) + " tokens");
  if (o.vocab_size <= 0) shape.vocab_size = tokenizer.vocab_size();
  const std::string name = dir.filename().empty() ? dir.parent_path().filename().string() : dir.filename().string();
  const std::string out = f.out.empty() ? shape.name + "-" + name + "-" + f.dtype + (format == "gguf" ? ".gguf" : "") : f.out;
  if (format == "hf") {
    if (dtype.mix != engine::WeightTypes::Mix::None || dtype.embedding)
      throw std::invalid_argument("--dtype " + f.dtype + ": a Hugging Face folder holds f32, f16 or bf16 weights");
    engine::write_random_model_hf(out, shape, dtype.base, f.seed, tokenizer, f.tokenizer);
  } else {
    const engine::RealVocab vocab{&tokenizer, folder_chat_template(dir)};
    engine::write_random_model(out, shape, dtype, f.seed, &vocab);
  }
  vocab_note = "the vocabulary of " + (dir / "tokenizer.json").string();
  std::printf("wrote %s (%s): %s shape, %s weights (random), dim %d, %d layers, %d/%d heads, ffn %d, vocab %d (%s)\n",
              out.c_str(), format == "hf" ? "Hugging Face folder" : "GGUF", shape.name.c_str(), f.dtype.c_str(),
              shape.dim, shape.num_layers, shape.num_q_heads, shape.num_kv_heads, shape.ffn_dim, shape.vocab_size,
              vocab_note.c_str());
}

}  // namespace

void add_make_model_command(CLI::App& app) {
  auto flags = std::make_shared<MakeModelFlags>();
  CLI::App* cmd = app.add_subcommand("make-model", "Write a random-weight Llama / Mistral / Qwen model (GGUF or Hugging Face folder)");
  std::string preset_names;
  for (const auto& p : engine::model_presets()) preset_names += (preset_names.empty() ? "" : ", ") + p.name;
  cmd->add_option("--preset", flags->preset, "Shape: " + preset_names)->capture_default_str();
  cmd->add_option("--dtype", flags->dtype, "Weight dtype: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k, or the "
                  "mixes q4_k_m, q5_k_m")->capture_default_str();
  cmd->add_option("--embedding-dtype", flags->embedding_dtype,
                  "token_embd's weight dtype (GGUF), like llama-quantize's --token-embedding-type; default: as --dtype");
  cmd->add_option("--out,-o", flags->out,
                  "Output path (default: <preset>-<dtype>.gguf, with --tokenizer <preset>-<folder>-<dtype>[.gguf])");
  cmd->add_option("--tokenizer", flags->tokenizer,
                  "Folder with tokenizer.json + tokenizer_config.json: the model gets that vocabulary");
  cmd->add_option("--format", flags->format, "gguf or hf (default: hf with --tokenizer, else gguf)");
  cmd->add_option("--seed", flags->seed, "Seed of the random weights")->capture_default_str();
  cmd->add_option("--dim", flags->overrides.dim, "Override the hidden size");
  cmd->add_option("--layers", flags->overrides.num_layers, "Override the layer count");
  cmd->add_option("--heads", flags->overrides.num_q_heads, "Override the query head count");
  cmd->add_option("--kv-heads", flags->overrides.num_kv_heads, "Override the KV head count");
  cmd->add_option("--ffn", flags->overrides.ffn_dim, "Override the FFN size");
  cmd->add_option("--vocab", flags->overrides.vocab_size, "Override the vocabulary size");
  cmd->add_option("--context", flags->overrides.max_seq_len, "Override the context length");
  cmd->callback([flags] { run_make_model(*flags); });
}

}  // namespace inflight::cli

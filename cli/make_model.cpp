// `inflight make-model`: writes a random-weight Llama GGUF of a preset or custom shape (benchmarks).
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

#include "engine/builtin_model.h"
#include "cli/commands.h"

namespace inflight::cli {

namespace {

struct MakeModelFlags {
  std::string preset = "tiny";
  std::string dtype = "f16";
  std::string out;
  uint64_t seed = 0;
  engine::ModelShape overrides;  // zero fields keep the preset's value
};

kernels::DType parse_weight_dtype(const std::string& s) {
  if (s == "f32") return kernels::DType::F32;
  if (s == "f16") return kernels::DType::F16;
  if (s == "bf16") return kernels::DType::BF16;
  if (s == "q8_0") return kernels::DType::Q8_0;
  throw std::invalid_argument("--dtype: unknown weight dtype '" + s + "' (f32, f16, bf16, q8_0)");
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
  const kernels::DType dtype = parse_weight_dtype(f.dtype);
  const std::string out = f.out.empty() ? shape.name + "-" + f.dtype + ".gguf" : f.out;
  engine::write_random_model(out, shape, dtype, f.seed);
  std::printf("wrote %s: %s shape, %s weights (random), dim %d, %d layers, %d/%d heads, ffn %d, vocab %d\n",
              out.c_str(), shape.name.c_str(), f.dtype.c_str(), shape.dim, shape.num_layers, shape.num_q_heads,
              shape.num_kv_heads, shape.ffn_dim, shape.vocab_size);
}

}  // namespace

void add_make_model_command(CLI::App& app) {
  auto flags = std::make_shared<MakeModelFlags>();
  CLI::App* cmd = app.add_subcommand("make-model", "Write a random-weight Llama GGUF for benchmarks");
  cmd->add_option("--preset", flags->preset, "tiny, smollm-135m or tinyllama-1.1b")->capture_default_str();
  cmd->add_option("--dtype", flags->dtype, "Weight dtype: f32, f16, bf16, q8_0")->capture_default_str();
  cmd->add_option("--out,-o", flags->out, "Output path (default: <preset>-<dtype>.gguf)");
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

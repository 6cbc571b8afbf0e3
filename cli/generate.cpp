// `inflight generate`: one prompt, offline, printed as it is produced.
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

#include <spdlog/spdlog.h>

#include "engine/generator.h"
#include "engine/model_loader.h"
#include "kernels/cpu/isa.h"
#include "kernels/thread_pool.h"
#include "cli/commands.h"

namespace inflight::cli {

namespace {

struct GenerateFlags {
  std::string model;
  std::string prompt = "Once upon a time";
  int max_tokens = 128;
  engine::SamplingParams sampling{.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f};
  int64_t seed = -1;
  int kv_block_size = 16;
  std::string kv_cache_dtype = "f16";
  int kv_quant_group = 0;        // int8: channels per scale, 0 = head_dim
  float kv_static_amax = 0.0f;   // int8-static / fp8: 0 = calibrate from the first prefill
  int threads = 0;
  std::string device = "auto";
  bool ignore_eos = false;
};

void run_generate(const GenerateFlags& f) {
  if (f.threads > 0) kernels::set_num_threads(f.threads);
  engine::Device device;
  std::string why;
  if (!engine::resolve_device(f.device, &device, &why)) throw std::invalid_argument(why);
  spdlog::info("compute: {} threads, {} kernels", kernels::compute_pool().num_threads(),
               kernels::cpu::isa_name(kernels::cpu::active_isa()));
  spdlog::info("device: {} ({})", engine::device_name(device), why);
  if (!cache::is_power_of_two(f.kv_block_size))
    throw std::invalid_argument("--kv-block-size must be a power of two, got " + std::to_string(f.kv_block_size));
  kernels::KvDType kv_dtype;
  if (!kernels::parse_kv_dtype(f.kv_cache_dtype, &kv_dtype))
    throw std::invalid_argument("--kv-cache-dtype: unknown KV cache dtype '" + f.kv_cache_dtype + "' (" +
                                std::string(kernels::kv_dtype_names()) + ")");
  if (f.max_tokens < 1) throw std::invalid_argument("--max-tokens must be at least 1");
  engine::SamplingParams sampling = f.sampling;
  if (f.seed >= 0) sampling.seed = uint64_t(f.seed);
  if (const std::string err = engine::validate(sampling); !err.empty()) throw std::invalid_argument(err);

  if (f.model.empty()) {
    std::fprintf(stderr,
                 "inflight: no --model given: running the built-in default model, stories260K (a 260K-parameter "
                 "model that writes short English stories).\n          Run another with --model "
                 "path/to/model.gguf or --model path/to/hf-folder.\n");
  }
  engine::LoadedModel loaded = f.model.empty() ? engine::load_builtin_model() : engine::load_model(f.model);
  engine::Model model(std::move(loaded.weights), device);
  const engine::ModelConfig& c = model.config();
  spdlog::info("model {} ({}): {} layers, dim {}, {} query / {} KV heads, vocab {}, context {}{}", c.name,
               c.architecture, c.num_layers, c.dim, c.num_q_heads, c.num_kv_heads, c.vocab_size, c.max_seq_len,
               c.sliding_window > 0 ? ", sliding window " + std::to_string(c.sliding_window) : std::string());

  const std::vector<int32_t> prompt_ids = loaded.tokenizer.encode(f.prompt, loaded.tokenizer.add_bos());
  if (int(prompt_ids.size()) >= c.max_seq_len)
    throw std::invalid_argument("the prompt has " + std::to_string(prompt_ids.size()) +
                                " tokens; the model's context is " + std::to_string(c.max_seq_len));
  engine::GenerateOptions options;
  options.max_tokens = std::min(f.max_tokens, c.max_seq_len - int(prompt_ids.size()));
  options.sampling = sampling;
  options.stop_at_eos = !f.ignore_eos;

  cache::KvCacheConfig kv_config{c.num_layers,       c.num_kv_heads, c.head_dim, f.kv_block_size, 0, kv_dtype,
                                 f.kv_quant_group, f.kv_static_amax};
  if (device == engine::Device::Cuda) kv_config.device = cache::KvDevice::Cuda;
  if (const std::string err = cache::kv_config_error(kv_config); !err.empty()) throw std::invalid_argument(err);
  const int64_t tokens = int64_t(prompt_ids.size()) + options.max_tokens;
  kv_config.num_blocks = int((tokens + f.kv_block_size - 1) / f.kv_block_size);
  cache::KvCache kv(kv_config);

  std::fputs(f.prompt.c_str(), stdout);
  std::fflush(stdout);
  const engine::GenerateResult r = engine::generate(model, kv, loaded.tokenizer, prompt_ids, options,
                                                    [](const std::string& delta) {
                                                      std::fputs(delta.c_str(), stdout);
                                                      std::fflush(stdout);
                                                    });
  std::fputs("\n", stdout);
  const double n = double(r.generated_ids.size());
  std::fprintf(stderr,
               "inflight: prompt %zu tokens in %.3f s (%.1f tok/s); generated %.0f tokens in %.3f s (%.1f tok/s); "
               "finish: %s\n",
               prompt_ids.size(), r.prefill_seconds, double(prompt_ids.size()) / std::max(r.prefill_seconds, 1e-9), n,
               r.decode_seconds, n / std::max(r.decode_seconds, 1e-9), r.finish_reason.c_str());
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto flags = std::make_shared<GenerateFlags>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text for one prompt, offline");
  cmd->add_option("--model,-m", flags->model, "GGUF file or Hugging Face folder (default: the built-in model)");
  cmd->add_option("--prompt,-p", flags->prompt, "Prompt text, continued as it is (no chat template)")
      ->capture_default_str();
  cmd->add_option("--max-tokens,-n", flags->max_tokens,
                  "Tokens to generate at most; fewer at the end-of-sequence token or the model's context")
      ->capture_default_str();
  cmd->add_option("--temperature", flags->sampling.temperature,
                  "Sampling temperature; 0 = greedy (always the most likely token)")
      ->capture_default_str();
  cmd->add_option("--top-k", flags->sampling.top_k, "Sample among the k most likely tokens only; 0 = off")
      ->capture_default_str();
  cmd->add_option("--top-p", flags->sampling.top_p,
                  "Sample among the most likely tokens whose probabilities add up to p (nucleus); 1 = off")
      ->capture_default_str();
  cmd->add_option("--min-p", flags->sampling.min_p, "Drop tokens below min-p times the top probability")
      ->capture_default_str();
  cmd->add_option("--repetition-penalty", flags->sampling.repetition_penalty,
                  "Tokens of the prompt and the output so far: positive logits divided by it, negative ones "
                  "multiplied (> 0; 1 = off)")
      ->capture_default_str();
  cmd->add_option("--presence-penalty", flags->sampling.presence_penalty,
                  "Subtracted from the logit of each token generated so far, in [-2, 2]; 0 = off")
      ->capture_default_str();
  cmd->add_option("--frequency-penalty", flags->sampling.frequency_penalty,
                  "Subtracted from the logit of each token generated so far, times its count, in [-2, 2]; 0 = off")
      ->capture_default_str();
  cmd->add_option("--seed", flags->seed, "Sampling seed (-1 = random)")->capture_default_str();
  cmd->add_option("--kv-block-size", flags->kv_block_size, "Tokens per KV cache block (power of two)")
      ->capture_default_str();
  cmd->add_option("--kv-cache-dtype", flags->kv_cache_dtype,
                  "KV cache storage: f32, f16, bf16, int8 (scale per token, head and group), int8-static, "
                  "fp8 / fp8-e4m3, fp8-e5m2 (per-tensor scales)")
      ->capture_default_str();
  cmd->add_option("--kv-quant-group", flags->kv_quant_group,
                  "int8 KV: channels sharing one scale, >= 8 and dividing head_dim (0 = head_dim)")
      ->capture_default_str();
  cmd->add_option("--kv-static-amax", flags->kv_static_amax,
                  "int8-static / fp8 KV: |x| mapped to the largest code (0 = calibrate from the first prefill)")
      ->capture_default_str();
  cmd->add_option("--threads,-t", flags->threads, "Compute threads; 0 = $INFLIGHT_NUM_THREADS if set, else all cores")
      ->capture_default_str();
  cmd->add_option("--device", flags->device,
                  "Where the model runs: cpu, cuda (an NVIDIA GPU), or auto (cuda when one is present)")
      ->capture_default_str();
  cmd->add_flag("--ignore-eos", flags->ignore_eos, "Keep generating past the end-of-sequence token");
  cmd->callback([flags] { run_generate(*flags); });
}

}  // namespace inflight::cli

// write_random_model_hf (builtin_model.h): the random model as a Hugging Face folder.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "engine/builtin_model.h"
#include "engine/tokenizer.h"

namespace inflight::engine {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const char* safetensors_dtype(kernels::DType t) {
  switch (t) {
    case kernels::DType::F32: return "F32";
    case kernels::DType::F16: return "F16";
    case kernels::DType::BF16: return "BF16";
    default: break;
  }
  throw std::invalid_argument("--dtype " + std::string(kernels::dtype_name(t)) +
                              ": a Hugging Face folder holds f32, f16 or bf16 weights");
}

// GGUF tensor name -> Hugging Face name.
std::string hf_name(const std::string& gguf) {
  static const std::pair<const char*, const char*> parts[] = {
      {"attn_norm.weight", "input_layernorm.weight"},   {"attn_q.weight", "self_attn.q_proj.weight"},
      {"attn_k.weight", "self_attn.k_proj.weight"},     {"attn_v.weight", "self_attn.v_proj.weight"},
      {"attn_output.weight", "self_attn.o_proj.weight"}, {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},      {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"},      {"attn_q.bias", "self_attn.q_proj.bias"},
      {"attn_k.bias", "self_attn.k_proj.bias"},         {"attn_v.bias", "self_attn.v_proj.bias"},
      {"attn_q_norm.weight", "self_attn.q_norm.weight"}, {"attn_k_norm.weight", "self_attn.k_norm.weight"}};
  if (gguf == "token_embd.weight") return "model.embed_tokens.weight";
  if (gguf == "output_norm.weight") return "model.norm.weight";
  if (gguf == "output.weight") return "lm_head.weight";
  const size_t dot = gguf.find('.', 4);  // "blk.<i>.<part>"
  const std::string layer = gguf.substr(4, dot - 4), part = gguf.substr(dot + 1);
  for (const auto& [from, to] : parts)
    if (part == from) return "model.layers." + layer + "." + to;
  throw std::logic_error("no Hugging Face name for tensor " + gguf);
}

// The rows of a q or k weight [heads * head_dim, in] from the GGUF order (adjacent RoPE pairs) into HF's
// rotate-half order, as llama.cpp's converter undoes: HF row (h, j) for j < d/2 is GGUF row (h, 2j), and
// (h, d/2 + j) is (h, 2j + 1).
void permute_rows(std::vector<uint8_t>& data, int64_t heads, int64_t head_dim, size_t row_bytes) {
  std::vector<uint8_t> out(data.size());
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t j = 0; j < head_dim; ++j) {
      const int64_t src = h * head_dim + (j < head_dim / 2 ? 2 * j : 2 * (j - head_dim / 2) + 1);
      std::memcpy(out.data() + size_t(h * head_dim + j) * row_bytes, data.data() + size_t(src) * row_bytes, row_bytes);
    }
  data.swap(out);
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) throw std::runtime_error(path.string() + ": cannot write");
}

}  // namespace

void write_random_model_hf(const std::string& folder, const ModelShape& s, kernels::DType dtype, uint64_t seed,
                           const Tokenizer& tokenizer, const std::string& tokenizer_dir) {
  const std::string st_dtype = safetensors_dtype(dtype);
  std::vector<RandomTensor> tensors;
  // rope_freqs.weight is llama.cpp's; the HF config's rope_scaling gives the same factors.
  for_each_random_tensor(s, dtype, seed, [&](RandomTensor t) {
    if (t.name != "rope_freqs.weight") tensors.push_back(std::move(t));
  });
  const int head_dim = s.head_size();
  // GGUF llama / mistral q/k rows are in adjacent-pair order (permuted here); qwen files keep HF's order.
  const bool permute = s.architecture == "llama" || s.architecture == "mistral";

  std::error_code ec;
  fs::create_directories(folder, ec);
  if (ec) throw std::runtime_error(folder + ": cannot create the folder: " + ec.message());
  const fs::path dir(folder);

  // safetensors: u64 header length, JSON header (padded with spaces to 8 bytes), then the data.
  json header = json::object();
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  std::vector<uint64_t> sizes;
  for (const RandomTensor& t : tensors) {
    const int64_t rows = t.ne.size() == 2 ? t.ne[1] : 1;
    const uint64_t nbytes = uint64_t(rows) * uint64_t(kernels::row_bytes(t.dtype, t.ne[0]));
    std::vector<int64_t> shape(t.ne.rbegin(), t.ne.rend());
    header[hf_name(t.name)] = {{"dtype", t.dtype == kernels::DType::F32 ? "F32" : st_dtype},
                               {"shape", shape},
                               {"data_offsets", {offset, offset + nbytes}}};
    sizes.push_back(nbytes);
    offset += nbytes;
  }
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  const fs::path st_path = dir / "model.safetensors";
  std::ofstream out(st_path, std::ios::binary);
  if (!out) throw std::runtime_error(st_path.string() + ": cannot create: " + std::strerror(errno));
  const uint64_t n = header_text.size();
  for (int i = 0; i < 8; ++i) out.put(char((n >> (8 * i)) & 0xFF));
  out << header_text;
  for (size_t i = 0; i < tensors.size(); ++i) {
    std::vector<uint8_t> data(sizes[i]);
    tensors[i].fill(data.data());
    const std::string& name = tensors[i].name;
    const size_t row_bytes = size_t(kernels::row_bytes(tensors[i].dtype, tensors[i].ne[0]));
    if (permute && name.ends_with("attn_q.weight")) permute_rows(data, s.num_q_heads, head_dim, row_bytes);
    if (permute && name.ends_with("attn_k.weight")) permute_rows(data, s.num_kv_heads, head_dim, row_bytes);
    out.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size()));
  }
  out.close();
  if (!out) throw std::runtime_error(st_path.string() + ": write failed");

  const char* torch_dtype = dtype == kernels::DType::F32 ? "float32" : dtype == kernels::DType::F16 ? "float16" : "bfloat16";
  const char* hf_arch = s.architecture == "mistral" ? "MistralForCausalLM"
                       : s.architecture == "qwen2"   ? "Qwen2ForCausalLM"
                       : s.architecture == "qwen3"   ? "Qwen3ForCausalLM"
                                                     : "LlamaForCausalLM";
  json config = {{"architectures", {hf_arch}},
                 {"model_type", s.architecture},
                 {"hidden_size", s.dim},
                 {"intermediate_size", s.ffn_dim},
                 {"num_hidden_layers", s.num_layers},
                 {"num_attention_heads", s.num_q_heads},
                 {"num_key_value_heads", s.num_kv_heads},
                 {"head_dim", head_dim},
                 {"max_position_embeddings", s.max_seq_len},
                 {"rms_norm_eps", s.rms_eps},
                 {"rope_theta", s.rope_theta},
                 {"hidden_act", "silu"},
                 {"vocab_size", s.vocab_size},
                 {"tie_word_embeddings", s.tied},
                 {"torch_dtype", torch_dtype}};
  if (s.architecture == "mistral") config["sliding_window"] = s.sliding_window > 0 ? json(s.sliding_window) : json();
  if (s.architecture == "qwen2" || s.architecture == "qwen3") config["use_sliding_window"] = false;
  if (s.architecture == "qwen3") config["attention_bias"] = false;
  if (s.rope_scaling == "linear") {
    config["rope_scaling"] = {{"rope_type", "linear"}, {"factor", s.rope_factor}};
  } else if (s.rope_scaling == "yarn") {
    config["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", s.rope_factor},
                              {"original_max_position_embeddings", s.rope_original_context}};
  } else if (s.rope_scaling == "llama3") {
    config["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", s.rope_factor},
                              {"low_freq_factor", s.rope_low_freq_factor}, {"high_freq_factor", s.rope_high_freq_factor},
                              {"original_max_position_embeddings", s.rope_original_context}};
  }
  json generation = {{"do_sample", true}};
  if (tokenizer.bos_id() >= 0) config["bos_token_id"] = generation["bos_token_id"] = tokenizer.bos_id();
  if (tokenizer.eos_id() >= 0) config["eos_token_id"] = generation["eos_token_id"] = tokenizer.eos_id();
  write_text(dir / "config.json", config.dump(2) + "\n");
  write_text(dir / "generation_config.json", generation.dump(2) + "\n");
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json"}) {
    const fs::path from = fs::path(tokenizer_dir) / name;
    if (!fs::exists(from, ec)) continue;
    fs::copy_file(from, dir / name, fs::copy_options::overwrite_existing, ec);
    if (ec) throw std::runtime_error(from.string() + ": cannot copy into " + folder + ": " + ec.message());
  }
}

}  // namespace inflight::engine

#include "engine/model_loader.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <sstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "engine/default_model.h"
#include "engine/gguf.h"
#include "engine/load_error.h"
#include "engine/safetensors.h"

namespace inflight::engine {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// One tensor as the binder sees it, whichever format it came from.
struct TensorRef {
  std::string name;
  std::string file;            // named in errors
  std::vector<int64_t> dims;   // row-major, dims[0] slowest: a weight is [out, in]
  bool ggml_order = false;     // print shapes as GGUF ne (fastest first)
  kernels::DType dtype = kernels::DType::F32;
  const uint8_t* data = nullptr;
  int64_t nbytes = 0;
};

std::string format_dims(std::vector<int64_t> dims, bool ggml_order) {
  if (ggml_order) std::reverse(dims.begin(), dims.end());
  std::string s = ggml_order ? "ne [" : "shape [";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

std::vector<float> to_floats(const TensorRef& t, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  switch (t.dtype) {
    case kernels::DType::F32:
      std::memcpy(out.data(), t.data, size_t(n) * 4);
      break;
    case kernels::DType::F16:
    case kernels::DType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, t.data + 2 * i, 2);
        out[size_t(i)] = t.dtype == kernels::DType::F16 ? kernels::f16_to_f32(h) : kernels::bf16_to_f32(h);
      }
      break;
    default:  // the block formats (the reader checked n against the block size)
      kernels::dequantize_row(t.dtype, t.data, out.data(), n);
      break;
  }
  return out;
}

// Tensor names of one layout. Layer parts, in LayerWeights order: attn_norm, q, k, v, o, ffn_norm,
// gate, up, down, then the optional q/k/v biases (9-11), q/k norms (12-13), and the o and MLP biases
// (14-17, unsupported: refused by name).
struct TensorNames {
  std::string embed, output_norm, output, output_bias;
  std::string layer_prefix;  // + layer index + "." + part
  std::array<const char*, 18> parts;
  std::string layer(int i, int part) const { return layer_prefix + std::to_string(i) + "." + parts[size_t(part)]; }
};

const TensorNames kGgufNames{"token_embd.weight", "output_norm.weight", "output.weight", "output.bias", "blk.",
                             {"attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight",
                              "attn_output.weight", "ffn_norm.weight", "ffn_gate.weight", "ffn_up.weight",
                              "ffn_down.weight", "attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_q_norm.weight",
                              "attn_k_norm.weight", "attn_output.bias", "ffn_gate.bias", "ffn_up.bias",
                              "ffn_down.bias"}};
const TensorNames kHfNames{"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight", "lm_head.bias",
                           "model.layers.",
                           {"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                            "self_attn.v_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
                            "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
                            "self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias",
                            "self_attn.q_norm.weight", "self_attn.k_norm.weight", "self_attn.o_proj.bias",
                            "mlp.gate_proj.bias", "mlp.up_proj.bias", "mlp.down_proj.bias"}};

// Checks each tensor against the config and turns it into a view (matrices) or a copy (norms).
class WeightBinder {
 public:
  using Finder = std::function<std::optional<TensorRef>(const std::string&)>;
  WeightBinder(Finder find, std::string where, ModelWeights& w) : find_(std::move(find)), where_(std::move(where)), w_(w) {}

  std::optional<TensorRef> find(const std::string& name) const { return find_(name); }

  TensorRef require(const std::string& name, std::vector<int64_t> dims) const {
    std::optional<TensorRef> t = find_(name);
    if (!t) throw_load_error(where_, "missing tensor " + name);
    if (t->dims != dims)
      throw_load_error(t->file, "tensor " + name + " has " + format_dims(t->dims, t->ggml_order) + ", expected " +
                                    format_dims(dims, t->ggml_order));
    return *t;
  }

  kernels::WeightMatrix matrix(const std::string& name, int64_t rows, int64_t cols) const {
    return view(require(name, {rows, cols}), rows, cols);
  }

  kernels::WeightMatrix view(const TensorRef& t, int64_t rows, int64_t cols) const {
    const uint8_t* data = t.data;
    const size_t align = t.dtype == kernels::DType::F32 ? 4 : 2;
    if (reinterpret_cast<uintptr_t>(data) % align != 0) {  // safetensors data need not be aligned
      auto copy = std::make_shared<std::vector<float>>(size_t(t.nbytes + 3) / 4);
      std::memcpy(copy->data(), data, size_t(t.nbytes));
      data = reinterpret_cast<const uint8_t*>(copy->data());
      w_.storage.push_back(std::move(copy));
    }
    return {t.dtype, data, rows, cols};
  }

  std::vector<float> vector(const std::string& name, int64_t n) const { return to_floats(require(name, {n}), n); }

  void bind_all(const TensorNames& names, bool tie_requested) const {
    const ModelConfig& c = w_.config;
    w_.token_embd = matrix(names.embed, c.vocab_size, c.dim);
    // Layer by layer, not resized up front: a file claiming 10^9 layers fails at the first missing tensor
    // instead of allocating 10^9 empty layers first (found by fuzzing: regression-huge-block-count).
    w_.layers.clear();
    for (int i = 0; i < c.num_layers; ++i) {
      LayerWeights& l = w_.layers.emplace_back();
      l.attn_norm = vector(names.layer(i, 0), c.dim);
      l.wq = matrix(names.layer(i, 1), c.q_dim(), c.dim);
      l.wk = matrix(names.layer(i, 2), c.kv_dim(), c.dim);
      l.wv = matrix(names.layer(i, 3), c.kv_dim(), c.dim);
      l.wo = matrix(names.layer(i, 4), c.dim, c.q_dim());
      l.ffn_norm = vector(names.layer(i, 5), c.dim);
      l.w_gate = matrix(names.layer(i, 6), c.ffn_dim, c.dim);
      l.w_up = matrix(names.layer(i, 7), c.ffn_dim, c.dim);
      l.w_down = matrix(names.layer(i, 8), c.dim, c.ffn_dim);
      if (c.qkv_bias) {
        l.bq = vector(names.layer(i, 9), c.q_dim());
        l.bk = vector(names.layer(i, 10), c.kv_dim());
        l.bv = vector(names.layer(i, 11), c.kv_dim());
      }
      if (c.qk_norm) {
        l.q_norm = vector(names.layer(i, 12), c.head_dim);
        l.k_norm = vector(names.layer(i, 13), c.head_dim);
      }
      // A part the architecture does not have would be silently dropped: refuse it by name.
      for (int part = 9; part < int(names.parts.size()); ++part) {
        const bool expected = (part <= 11 && c.qkv_bias) || ((part == 12 || part == 13) && c.qk_norm);
        if (!expected && find_(names.layer(i, part)))
          throw_load_error(where_, "unsupported tensor " + names.layer(i, part) + " (architecture " + c.architecture +
                                       (part <= 11 ? " without q/k/v bias" : part <= 13 ? " without q/k norm" : "") + ")");
      }
    }
    w_.output_norm = vector(names.output_norm, c.dim);
    if (find_(names.output_bias)) throw_load_error(where_, "unsupported tensor " + names.output_bias);
    // Tied when asked for, when the output tensor is absent, or when it is a bit-identical copy of the
    // embedding (stories260K ships one): the output matmul then reads the embedding's memory.
    w_.output = w_.token_embd;
    w_.config.tied_embeddings = true;
    if (tie_requested || !find_(names.output)) return;
    const TensorRef out = require(names.output, {c.vocab_size, c.dim});
    const TensorRef emb = *find_(names.embed);
    const bool same = out.dtype == emb.dtype && out.nbytes == emb.nbytes &&
                      std::memcmp(out.data, emb.data, size_t(out.nbytes)) == 0;
    if (same) return;
    w_.output = view(out, c.vocab_size, c.dim);
    w_.config.tied_embeddings = false;
  }

 private:
  Finder find_;
  std::string where_;
  ModelWeights& w_;
};

// ------------------------------------------------------------------------------------------------
// GGUF

int positive_int(const std::string& path, const std::string& key, int64_t v) {
  if (v <= 0 || v > std::numeric_limits<int>::max())
    throw_load_error(path, "key " + key + " = " + std::to_string(v) + " is out of range");
  return int(v);
}

int require_int(const GgufFile& g, const std::string& key) {
  auto v = g.get_int(key);
  if (!v) throw_load_error(g.path(), "missing key " + key);
  return positive_int(g.path(), key, *v);
}

int optional_int(const GgufFile& g, const std::string& key, int fallback) {
  auto v = g.get_int(key);
  return v ? positive_int(g.path(), key, *v) : fallback;
}

// GGUF rope scaling keys (<arch>.rope.scaling.*), as llama.cpp reads them; Llama 3's scaling is the
// rope_freqs.weight tensor instead (read by the binder).
void gguf_rope_scaling(const GgufFile& g, const std::string& arch, ModelConfig& c) {
  const std::string& path = g.path();
  const std::string prefix = arch + ".rope.scaling.";
  double factor = g.get_float(prefix + "factor").value_or(0.0);
  if (factor == 0.0) factor = g.get_float(arch + ".rope.scale_linear").value_or(0.0);  // the older key
  // llama.cpp: a factor without a type is linear scaling.
  const std::string type = g.get_string(prefix + "type").value_or(factor != 0.0 && factor != 1.0 ? "linear" : "none");
  if (type == "none") return;
  if (type != "linear" && type != "yarn")
    throw_load_error(path, "key " + prefix + "type: unsupported rope scaling " + type + " (supported: none, linear, yarn)");
  if (g.get_float(prefix + "yarn_log_multiplier").value_or(0.0) != 0.0)
    throw_load_error(path, "key " + prefix + "yarn_log_multiplier: unsupported");
  c.rope_scaling = type == "linear" ? kernels::RopeScaling::Linear : kernels::RopeScaling::Yarn;
  c.rope_factor = factor == 0.0 ? 1.0f : float(factor);
  if (!(c.rope_factor >= 1.0f))
    throw_load_error(path, "key " + prefix + "factor = " + std::to_string(factor) + " must be >= 1");
  const float attn_factor = float(g.get_float(prefix + "attn_factor").value_or(1.0));
  if (c.rope_scaling == kernels::RopeScaling::Yarn) {
    c.rope_original_context = optional_int(g, prefix + "original_context_length", c.max_seq_len);
    c.rope_beta_fast = float(g.get_float(prefix + "yarn_beta_fast").value_or(32.0));
    c.rope_beta_slow = float(g.get_float(prefix + "yarn_beta_slow").value_or(1.0));
    // llama.cpp: cos and sin scaled by the yarn magnitude 1 + 0.1 ln(factor), times attn_factor.
    c.rope_attn_factor = attn_factor * (1.0f + 0.1f * std::log(c.rope_factor));
  } else {
    c.rope_attn_factor = attn_factor;
  }
}

ModelConfig gguf_config(const GgufFile& g) {
  const std::string& path = g.path();
  ModelConfig c;
  const auto arch_key = g.get_string("general.architecture");
  if (!arch_key) throw_load_error(path, "missing key general.architecture");
  const std::string arch = *arch_key;
  if (arch != "llama" && arch != "qwen2" && arch != "qwen3")
    throw_load_error(path, "key general.architecture: unsupported architecture " + arch + " (supported: llama, qwen2, qwen3)");
  c.architecture = arch;
  c.name = g.get_string("general.name").value_or(fs::path(path).stem().string());
  c.dim = require_int(g, arch + ".embedding_length");
  c.num_layers = require_int(g, arch + ".block_count");
  c.num_q_heads = require_int(g, arch + ".attention.head_count");
  c.num_kv_heads = optional_int(g, arch + ".attention.head_count_kv", c.num_q_heads);
  c.ffn_dim = require_int(g, arch + ".feed_forward_length");
  c.max_seq_len = require_int(g, arch + ".context_length");
  c.head_dim = optional_int(g, arch + ".attention.key_length", c.dim / c.num_q_heads);
  if (optional_int(g, arch + ".attention.value_length", c.head_dim) != c.head_dim)
    throw_load_error(path, "key " + arch + ".attention.value_length differs from key_length (unsupported)");
  c.rotary_dim = optional_int(g, arch + ".rope.dimension_count", c.head_dim);
  const auto eps = g.get_float(arch + ".attention.layer_norm_rms_epsilon");
  if (!eps) throw_load_error(path, "missing key " + arch + ".attention.layer_norm_rms_epsilon");
  c.rms_eps = float(*eps);
  c.rope_theta = float(g.get_float(arch + ".rope.freq_base").value_or(10000.0));
  gguf_rope_scaling(g, arch, c);
  // llama.cpp's rope types: NORM (adjacent pairs) for llama, NEOX (rotate-half) for the Qwen family.
  c.rope_style = arch == "llama" ? kernels::RopeStyle::GptJ : kernels::RopeStyle::NeoX;
  if (auto window = g.get_int(arch + ".attention.sliding_window")) {
    c.sliding_window = positive_int(path, arch + ".attention.sliding_window", *window);
    if (c.architecture == "llama") c.architecture = "mistral";
  }
  c.qk_norm = arch == "qwen3";
  c.qkv_bias = g.find_tensor("blk.0.attn_q.bias") != nullptr;
  if (arch == "qwen2" && !c.qkv_bias) throw_load_error(path, "missing tensor blk.0.attn_q.bias (qwen2 has q/k/v biases)");
  if (auto v = g.get_int(arch + ".vocab_size")) {
    c.vocab_size = positive_int(path, arch + ".vocab_size", *v);
  } else if (const GgufTensorInfo* t = g.find_tensor("token_embd.weight"); t && t->ne.size() == 2) {
    c.vocab_size = positive_int(path, "token_embd.weight ne[1]", t->ne[1]);
  } else {
    c.vocab_size = positive_int(path, "tokenizer.ggml.tokens count", int64_t(g.get_string_array("tokenizer.ggml.tokens").size()));
  }
  auto token_id = [&](const std::string& key, int fallback) {
    auto v = g.get_int(key);
    if (!v) return fallback;
    if (*v < 0 || *v >= c.vocab_size) throw_load_error(path, "key " + key + " = " + std::to_string(*v) + " is outside the vocabulary");
    return int(*v);
  };
  c.bos_id = token_id("tokenizer.ggml.bos_token_id", 1);
  c.eos_id = token_id("tokenizer.ggml.eos_token_id", 2);
  validate(c, path);
  return c;
}

Vocab gguf_vocab(const GgufFile& g, int vocab_size) {
  const std::string& path = g.path();
  Vocab v;
  const auto model = g.get_string("tokenizer.ggml.model");
  if (!model) throw_load_error(path, "missing key tokenizer.ggml.model");
  if (*model != "llama" && *model != "gpt2")
    throw_load_error(path, "unsupported tokenizer " + *model + " (supported: llama, gpt2)");
  v.model = *model;
  v.tokens = g.get_string_array("tokenizer.ggml.tokens");
  if (v.tokens.empty()) throw_load_error(path, "missing key tokenizer.ggml.tokens");
  if (vocab_size > 0 && v.tokens.size() > size_t(vocab_size))
    throw_load_error(path, "key tokenizer.ggml.tokens has " + std::to_string(v.tokens.size()) +
                               " tokens, more than the model's vocabulary of " + std::to_string(vocab_size));
  if (v.model == "gpt2") {
    v.merges = g.get_string_array("tokenizer.ggml.merges");
    v.pre = g.get_string("tokenizer.ggml.pre").value_or("default");
  }
  for (double s : g.get_float_array("tokenizer.ggml.scores")) v.scores.push_back(float(s));
  for (int64_t t : g.get_int_array("tokenizer.ggml.token_type")) {
    if (t < 0 || t > 6) throw_load_error(path, "key tokenizer.ggml.token_type: bad type " + std::to_string(t));
    v.types.push_back(int32_t(t));
  }
  if (!v.scores.empty() && v.scores.size() != v.tokens.size())
    throw_load_error(path, "key tokenizer.ggml.scores has " + std::to_string(v.scores.size()) + " entries for " +
                               std::to_string(v.tokens.size()) + " tokens");
  if (!v.types.empty() && v.types.size() != v.tokens.size())
    throw_load_error(path, "key tokenizer.ggml.token_type has " + std::to_string(v.types.size()) +
                               " entries for " + std::to_string(v.tokens.size()) + " tokens");
  auto id = [&](const std::string& key, int32_t fallback) {
    auto x = g.get_int(key);
    if (!x) return fallback;
    if (*x < -1 || *x >= int64_t(v.tokens.size()))
      throw_load_error(path, "key " + key + " = " + std::to_string(*x) + " is outside the vocabulary");
    return int32_t(*x);
  };
  v.unk_id = id("tokenizer.ggml.unknown_token_id", 0);
  v.bos_id = id("tokenizer.ggml.bos_token_id", 1);
  v.eos_id = id("tokenizer.ggml.eos_token_id", 2);
  v.pad_id = id("tokenizer.ggml.padding_token_id", -1);
  v.add_bos = g.get_bool("tokenizer.ggml.add_bos_token").value_or(v.model == "llama");
  v.add_eos = g.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
  v.add_space_prefix = g.get_bool("tokenizer.ggml.add_space_prefix").value_or(true);
  return v;
}

LoadedModel load_gguf(const GgufFile& g) {
  ModelWeights w;
  w.config = gguf_config(g);
  w.storage.push_back(g.storage());
  WeightBinder binder(
      [&g](const std::string& name) -> std::optional<TensorRef> {
        const GgufTensorInfo* t = g.find_tensor(name);
        if (t == nullptr) return std::nullopt;
        return TensorRef{t->name, g.path(), std::vector<int64_t>(t->ne.rbegin(), t->ne.rend()), true, t->dtype,
                         t->data, t->nbytes};
      },
      g.path(), w);
  binder.bind_all(kGgufNames, false);
  // Llama 3's rope scaling: per-pair frequency divisors (llama.cpp's rope_freqs.weight).
  if (binder.find("rope_freqs.weight")) {
    if (w.config.architecture.starts_with("qwen"))
      throw_load_error(g.path(), "unsupported tensor rope_freqs.weight (architecture " + w.config.architecture + ")");
    w.config.rope_freq_factors = binder.vector("rope_freqs.weight", w.config.rotary_dim / 2);
    validate(w.config, g.path());
  }
  Tokenizer tokenizer = Tokenizer::from_vocab(gguf_vocab(g, w.config.vocab_size), g.path());
  tokenizer.pad_vocab(w.config.vocab_size);
  if (g.private_copy()) interleave_matrices(w, true);  // in the file's private copy: no second copy of them
  return LoadedModel{std::move(w), std::move(tokenizer), g.get_string("tokenizer.chat_template").value_or("")};
}

// ------------------------------------------------------------------------------------------------
// Hugging Face folder

class JsonConfig {
 public:
  explicit JsonConfig(const fs::path& path) : path_(path.string()) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw_load_error(path_, "cannot open (missing config.json?)");
    std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    try {
      j_ = json::parse(text);
    } catch (const json::exception& e) {
      throw_load_error(path_, std::string("bad JSON: ") + e.what());
    }
    if (!j_.is_object()) throw_load_error(path_, "not a JSON object");
  }
  const std::string& path() const { return path_; }

  // nullopt when absent or null.
  const json* get(const std::string& key) const {
    auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  std::optional<int64_t> get_int(const std::string& key) const {
    const json* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (v->is_array() && !v->empty()) v = &(*v)[0];  // eos_token_id may list several ids
    if (!v->is_number_integer()) throw_load_error(path_, "key " + key + " is not an integer");
    return v->get<int64_t>();
  }
  int require_positive(const std::string& key) const {
    auto v = get_int(key);
    if (!v) throw_load_error(path_, "missing key " + key);
    return positive_int(path_, key, *v);
  }
  std::optional<double> get_float(const std::string& key) const {
    const json* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number()) throw_load_error(path_, "key " + key + " is not a number");
    return v->get<double>();
  }
  std::optional<bool> get_bool(const std::string& key) const {
    const json* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_boolean()) throw_load_error(path_, "key " + key + " is not a bool");
    return v->get<bool>();
  }
  std::optional<std::string> get_string(const std::string& key) const {
    const json* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_string()) throw_load_error(path_, "key " + key + " is not a string");
    return v->get<std::string>();
  }

 private:
  std::string path_;
  json j_;
};

// The HF config's rope_scaling object (transformers' rope_type / type names).
void hf_rope_scaling(const JsonConfig& j, ModelConfig& c) {
  const std::string& path = j.path();
  const json* rs = j.get("rope_scaling");
  if (rs == nullptr) return;
  if (!rs->is_object()) throw_load_error(path, "key rope_scaling is not an object");
  const std::string type = rs->value("rope_type", rs->value("type", std::string()));
  if (type == "default") return;
  auto number = [&](const char* key, std::optional<double> fallback) -> double {
    auto it = rs->find(key);
    if (it == rs->end() || it->is_null()) {
      if (!fallback) throw_load_error(path, std::string("missing key rope_scaling.") + key + " (rope_type " + type + ")");
      return *fallback;
    }
    if (!it->is_number()) throw_load_error(path, std::string("key rope_scaling.") + key + " is not a number");
    return it->get<double>();
  };
  const double factor = number("factor", std::nullopt);
  if (!(factor >= 1.0)) throw_load_error(path, "key rope_scaling.factor = " + std::to_string(factor) + " must be >= 1");
  if (type == "linear") {
    c.rope_scaling = kernels::RopeScaling::Linear;
    c.rope_factor = float(factor);
  } else if (type == "llama3") {
    const int original = int(number("original_max_position_embeddings", std::nullopt));
    const double low = number("low_freq_factor", std::nullopt), high = number("high_freq_factor", std::nullopt);
    if (original <= 0 || !(low > 0.0) || !(high > low))
      throw_load_error(path, "key rope_scaling: llama3 needs original_max_position_embeddings > 0 and "
                             "high_freq_factor > low_freq_factor > 0");
    c.rope_freq_factors.resize(size_t(c.rotary_dim / 2));
    kernels::llama3_rope_freq_factors(c.rope_theta, c.rotary_dim, float(factor), float(low), float(high), original,
                                      c.rope_freq_factors.data());
  } else if (type == "yarn") {
    for (const char* key : {"mscale", "mscale_all_dim"})
      if (rs->contains(key) && !(*rs)[key].is_null())
        throw_load_error(path, std::string("key rope_scaling.") + key + ": unsupported");
    if (rs->contains("truncate") && (*rs)["truncate"] == false)
      throw_load_error(path, "key rope_scaling.truncate: false is unsupported");
    c.rope_scaling = kernels::RopeScaling::Yarn;
    c.rope_factor = float(factor);
    c.rope_original_context = int(number("original_max_position_embeddings", double(c.max_seq_len)));
    c.rope_beta_fast = float(number("beta_fast", 32.0));
    c.rope_beta_slow = float(number("beta_slow", 1.0));
    c.rope_attn_factor = float(number("attention_factor", 1.0 + 0.1 * std::log(factor)));
  } else {
    throw_load_error(path, "key rope_scaling: unsupported rope scaling type " +
                               (type.empty() ? std::string("(none)") : type) + " (supported: default, linear, llama3, yarn)");
  }
}

ModelConfig hf_config(const JsonConfig& j, const std::string& folder) {
  const std::string& path = j.path();
  ModelConfig c;
  std::string arch = j.get_string("model_type").value_or("");
  if (arch.empty()) {
    const json* archs = j.get("architectures");
    const std::string first = archs && archs->is_array() && !archs->empty() && (*archs)[0].is_string()
                                  ? (*archs)[0].get<std::string>() : "";
    arch = first == "LlamaForCausalLM"     ? "llama"
           : first == "MistralForCausalLM" ? "mistral"
           : first == "Qwen2ForCausalLM"   ? "qwen2"
           : first == "Qwen3ForCausalLM"   ? "qwen3"
                                           : first;
  }
  if (arch != "llama" && arch != "mistral" && arch != "qwen2" && arch != "qwen3")
    throw_load_error(path, "key model_type / architectures: unsupported architecture " +
                               (arch.empty() ? std::string("(none)") : arch) + " (supported: llama, mistral, qwen2, qwen3)");
  // Qwen 2 always has q/k/v biases and no o bias; elsewhere attention_bias would add an o bias too.
  if (arch != "qwen2" && j.get_bool("attention_bias").value_or(false))
    throw_load_error(path, "key attention_bias: unsupported (an o_proj bias)");
  if (j.get_bool("mlp_bias").value_or(false)) throw_load_error(path, "key mlp_bias: unsupported");
  if (auto act = j.get_string("hidden_act"); act && *act != "silu")
    throw_load_error(path, "key hidden_act: unsupported activation " + *act);
  if (arch.starts_with("qwen") && j.get_bool("use_sliding_window").value_or(false))
    throw_load_error(path, "key use_sliding_window: unsupported for " + arch + " (per-layer windows)");
  c.qkv_bias = arch == "qwen2";
  c.qk_norm = arch == "qwen3";
  c.architecture = arch;
  c.name = fs::path(folder).filename().string();
  if (c.name.empty()) c.name = fs::path(folder).parent_path().filename().string();
  c.dim = j.require_positive("hidden_size");
  c.num_layers = j.require_positive("num_hidden_layers");
  c.num_q_heads = j.require_positive("num_attention_heads");
  c.num_kv_heads = j.get_int("num_key_value_heads") ? j.require_positive("num_key_value_heads") : c.num_q_heads;
  c.head_dim = j.get_int("head_dim") ? j.require_positive("head_dim") : c.dim / c.num_q_heads;
  c.ffn_dim = j.require_positive("intermediate_size");
  c.vocab_size = j.require_positive("vocab_size");
  c.max_seq_len = j.get_int("max_position_embeddings") ? j.require_positive("max_position_embeddings") : 2048;
  // Mistral's sliding window (the band mask); null or absent: full attention.
  if (arch == "mistral")
    if (auto window = j.get_int("sliding_window"); window && *window > 0) c.sliding_window = int(*window);
  c.rms_eps = float(j.get_float("rms_norm_eps").value_or(1e-6));
  c.rope_theta = float(j.get_float("rope_theta").value_or(10000.0));
  const double partial = j.get_float("partial_rotary_factor").value_or(1.0);
  if (!(partial > 0.0 && partial <= 1.0)) throw_load_error(path, "key partial_rotary_factor out of (0, 1]");
  c.rotary_dim = int(double(c.head_dim) * partial);
  c.rope_style = kernels::RopeStyle::NeoX;
  hf_rope_scaling(j, c);
  c.tied_embeddings = j.get_bool("tie_word_embeddings").value_or(false);
  c.bos_id = int(j.get_int("bos_token_id").value_or(1));
  c.eos_id = int(j.get_int("eos_token_id").value_or(2));
  validate(c, path);
  return c;
}

// chat_template.jinja, else tokenizer_config.json "chat_template": a string, or a list of {name, template}
// (the "default" one), as transformers reads them. Optional metadata: absent or unreadable files give "".
std::string hf_chat_template(const fs::path& dir) {
  if (std::ifstream jinja(dir / "chat_template.jinja", std::ios::binary); jinja) {
    std::ostringstream text;
    text << jinja.rdbuf();
    return text.str();
  }
  std::ifstream in(dir / "tokenizer_config.json", std::ios::binary);
  if (!in) return {};
  const json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("chat_template")) return {};
  const json& t = j["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array())
    for (const json& item : t)
      if (item.is_object() && item.value("name", "") == "default" && item.contains("template") && item["template"].is_string())
        return item["template"].get<std::string>();
  return {};
}

// tokenizer.json (with tokenizer_config.json) when present, else sentencepiece's tokenizer.model.
Tokenizer hf_tokenizer(const fs::path& dir) {
  std::error_code ec;
  if (fs::is_regular_file(dir / "tokenizer.json", ec))
    return Tokenizer::from_tokenizer_json((dir / "tokenizer.json").string(), (dir / "tokenizer_config.json").string());
  if (fs::is_regular_file(dir / "tokenizer.model", ec)) return Tokenizer::from_file((dir / "tokenizer.model").string());
  throw_load_error(dir.string(), "no tokenizer.json or tokenizer.model (a Hugging Face folder needs one)");
}

LoadedModel load_hf(const std::string& folder) {
  const fs::path dir(folder);
  const JsonConfig config((dir / "config.json").string());
  ModelWeights w;
  w.config = hf_config(config, folder);
  const SafetensorsModel st = SafetensorsModel::open_folder(folder);
  for (auto& s : st.storage()) w.storage.push_back(s);
  WeightBinder binder(
      [&st](const std::string& name) -> std::optional<TensorRef> {
        if (st.find_tensor(name) == nullptr) return std::nullopt;
        const SafetensorsTensor& t = st.require(name);  // throws on an unusable dtype
        return TensorRef{t.name, t.file, t.shape, false, *t.dtype, t.data, t.nbytes};
      },
      folder, w);
  binder.bind_all(kHfNames, w.config.tied_embeddings);
  // A matrix the binder copied for alignment is private memory too.
  const auto& files = st.files();
  if (std::all_of(files.begin(), files.end(), [](const SafetensorsFile& f) { return f.private_copy(); }))
    interleave_matrices(w, true);

  Tokenizer tokenizer = hf_tokenizer(dir);
  if (tokenizer.vocab_size() > w.config.vocab_size)
    throw_load_error(folder, "the tokenizer has " + std::to_string(tokenizer.vocab_size()) +
                                 " tokens, more than the model's vocabulary of " + std::to_string(w.config.vocab_size));
  tokenizer.pad_vocab(w.config.vocab_size);
  return LoadedModel{std::move(w), std::move(tokenizer), hf_chat_template(dir)};
}

}  // namespace

LoadedModel load_model(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return load_hf(path);
  return load_gguf(GgufFile::open(path));
}

Tokenizer load_tokenizer(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  if (fs::is_directory(p, ec)) return hf_tokenizer(p);
  if (p.filename() == "tokenizer.json") return Tokenizer::from_tokenizer_json(path, (p.parent_path() / "tokenizer_config.json").string());
  if (p.extension() == ".model") return Tokenizer::from_file(path);
  const GgufFile g = GgufFile::open(path);
  return Tokenizer::from_vocab(gguf_vocab(g, 0), path);
}

LoadedModel load_gguf_model(std::shared_ptr<const std::vector<uint8_t>> bytes, const std::string& name) {
  return load_gguf(GgufFile::from_memory(std::move(bytes), name));
}

LoadedModel load_builtin_model() {
  return load_gguf(GgufFile::from_static(default_model_gguf(), std::string("<builtin:") + kDefaultModelName + ">"));
}

}  // namespace inflight::engine

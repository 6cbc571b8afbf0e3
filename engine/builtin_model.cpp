#include "engine/builtin_model.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "engine/gguf.h"
#include "engine/tokenizer.h"
#include "engine/tokenizer_bpe.h"
#include "kernels/ops.h"

namespace inflight::engine {

namespace {

constexpr int kNumSpecialTokens = 3;   // <unk>, <s>, </s>
constexpr int kNumByteTokens = 256;    // <0x00>..<0xFF>

// GGUF token types (llama.cpp's llama_token_type).
constexpr int64_t kTypeNormal = 1, kTypeUnknown = 2, kTypeControl = 3, kTypeUserDefined = 4, kTypeUnused = 5,
                  kTypeByte = 6;

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : s) h = (h ^ ch) * 0x100000001b3ull;
  return h;
}

// A matrix [rows, cols] of uniform values with standard deviation `std`; element i is a function of
// (key, i) only.
struct RandomMatrix {
  uint64_t key;
  float std;
  int64_t rows, cols;
  kernels::DType dtype;

  void fill_row_f32(int64_t row, float* out) const {
    const float amplitude = std * std::sqrt(3.0f);  // uniform(-a, a) has std a/sqrt(3)
    const uint64_t base = key + uint64_t(row) * uint64_t(cols);
    for (int64_t c = 0; c < cols; ++c) {
      const uint64_t bits = splitmix64(base + uint64_t(c)) >> 40;      // 24 random bits
      const float u = (float(bits) + 0.5f) * (1.0f / 8388608.0f) - 1.0f;  // (-1, 1)
      out[c] = amplitude * u;
    }
  }

  // Writes rows * row_bytes(dtype, cols) bytes to dst.
  void write(uint8_t* dst) const {
    std::vector<float> row(static_cast<size_t>(cols));
    const int64_t row_stride = kernels::row_bytes(dtype, cols);
    for (int64_t r = 0; r < rows; ++r, dst += row_stride) {
      fill_row_f32(r, row.data());
      switch (dtype) {
        case kernels::DType::F32:
          std::memcpy(dst, row.data(), size_t(cols) * 4);
          break;
        case kernels::DType::F16:
        case kernels::DType::BF16:
          for (int64_t c = 0; c < cols; ++c) {
            const uint16_t h = dtype == kernels::DType::F16 ? kernels::f32_to_f16(row[size_t(c)])
                                                            : kernels::f32_to_bf16(row[size_t(c)]);
            std::memcpy(dst + 2 * c, &h, 2);
          }
          break;
        default:  // the block formats
          kernels::quantize_row(dtype, row.data(), dst, cols);
          break;
      }
    }
  }
};

void check_shape(const ModelShape& s) {
  auto fail = [&](const std::string& what) {
    throw std::invalid_argument("random model " + s.name + ": " + what);
  };
  if (s.dim <= 0 || s.num_layers <= 0 || s.num_q_heads <= 0 || s.num_kv_heads <= 0 || s.ffn_dim <= 0 ||
      s.max_seq_len <= 0)
    fail("sizes must be positive");
  if (s.head_dim < 0 || s.sliding_window < 0) fail("sizes must be positive");
  if (s.head_dim == 0 && s.dim % s.num_q_heads != 0) fail("dim is not a multiple of num_q_heads");
  if (s.num_q_heads % s.num_kv_heads != 0) fail("num_q_heads is not a multiple of num_kv_heads");
  if (s.head_size() % 2 != 0) fail("head_dim must be even for RoPE");
  if (s.architecture != "llama" && s.architecture != "mistral" && s.architecture != "qwen2" && s.architecture != "qwen3")
    fail("unknown architecture " + s.architecture + " (llama, mistral, qwen2, qwen3)");
  if (s.architecture == "qwen2" && s.head_size() * s.num_q_heads != s.dim)
    fail("qwen2 needs head_dim * num_q_heads == dim");
  if (s.sliding_window > 0 && s.architecture != "mistral") fail("only mistral has a sliding window");
  if (!s.rope_scaling.empty() && s.rope_scaling != "linear" && s.rope_scaling != "yarn" && s.rope_scaling != "llama3")
    fail("unknown rope scaling " + s.rope_scaling + " (linear, yarn, llama3)");
  if (!s.rope_scaling.empty() && !(s.rope_factor >= 1.0f)) fail("rope scaling factor must be >= 1");
  if ((s.rope_scaling == "yarn" || s.rope_scaling == "llama3") && s.rope_original_context <= 0)
    fail("yarn and llama3 rope scaling need the original context length");
  if (s.rope_scaling == "llama3" && !(s.rope_high_freq_factor > s.rope_low_freq_factor && s.rope_low_freq_factor > 0))
    fail("llama3 rope scaling needs high_freq_factor > low_freq_factor > 0");
  if (s.vocab_size < kNumSpecialTokens + kNumByteTokens + 1) fail("vocab_size must be at least 260");
}

// The synthetic sentencepiece vocabulary: <unk>, <s>, </s>, the 256 byte tokens, then "▁", the
// printable ASCII characters, then "▁" + lowercase strings of growing length (each formed by
// merging a shorter one with a letter, so every piece is reachable). Scores fall with the id.
void add_vocab(GgufWriter& w, int vocab_size) {
  auto tokens = std::make_shared<GgufArray>();
  auto scores = std::make_shared<GgufArray>();
  auto types = std::make_shared<GgufArray>();
  tokens->type = GgufType::String;
  scores->type = GgufType::F32;
  types->type = GgufType::I32;
  auto add = [&](std::string piece, double score, int64_t type) {
    tokens->items.emplace_back(std::move(piece));
    scores->items.emplace_back(score);
    types->items.emplace_back(type);
  };
  add("<unk>", 0.0, kTypeUnknown);
  add("<s>", 0.0, kTypeControl);
  add("</s>", 0.0, kTypeControl);
  for (int b = 0; b < kNumByteTokens; ++b) {
    char piece[8];
    std::snprintf(piece, sizeof(piece), "<0x%02X>", b);
    add(piece, 0.0, kTypeByte);
  }
  const std::string space = "\xE2\x96\x81";  // U+2581
  double score = 0.0;
  auto add_normal = [&](std::string piece) {
    if (int(tokens->items.size()) < vocab_size) add(std::move(piece), score, kTypeNormal);
    score -= 1.0;
  };
  add_normal(space);
  for (char ch = 33; ch <= 126; ++ch) add_normal(std::string(1, ch));
  for (int len = 1; int(tokens->items.size()) < vocab_size; ++len) {
    std::string letters(size_t(len), 'a');  // counts through a..z^len in lexicographic order
    while (int(tokens->items.size()) < vocab_size) {
      add_normal(space + letters);
      int i = len - 1;
      while (i >= 0 && letters[size_t(i)] == 'z') letters[size_t(i--)] = 'a';
      if (i < 0) break;
      ++letters[size_t(i)];
    }
  }
  w.set("tokenizer.ggml.model", std::string("llama"));
  w.set("tokenizer.ggml.tokens", tokens);
  w.set("tokenizer.ggml.scores", scores);
  w.set("tokenizer.ggml.token_type", types);
  w.set("tokenizer.ggml.unknown_token_id", uint64_t(0));
  w.set("tokenizer.ggml.bos_token_id", uint64_t(1));
  w.set("tokenizer.ggml.eos_token_id", uint64_t(2));
  w.set("tokenizer.ggml.add_bos_token", true);
  w.set("tokenizer.ggml.add_eos_token", false);
  w.set("tokenizer.ggml.add_space_prefix", true);
}

// gpt2 (byte-level BPE) vocabulary of a real tokenizer, as llama.cpp's convert_hf_to_gguf.py writes it.
void add_bpe_vocab(GgufWriter& w, const RealVocab& vocab) {
  const BpeTokenizer* bpe = vocab.tokenizer->bpe();
  if (bpe == nullptr) throw std::invalid_argument("--tokenizer: GGUF export needs a tokenizer.json BPE tokenizer");
  const BpeSpec& spec = bpe->spec();
  if (spec.gguf_pre.empty() || spec.byte_fallback)
    throw std::invalid_argument(
        "--format gguf: the tokenizer's pre-tokenizer is not one GGUF names (tokenizer.ggml.pre: gpt-2, llama-bpe, "
        "qwen2, smollm); write a Hugging Face folder instead (--format hf)");
  auto tokens = std::make_shared<GgufArray>();
  auto types = std::make_shared<GgufArray>();
  auto merges = std::make_shared<GgufArray>();
  tokens->type = GgufType::String;
  types->type = GgufType::I32;
  merges->type = GgufType::String;
  std::vector<int64_t> type_of(spec.tokens.size(), kTypeNormal);
  for (const AddedToken& a : spec.added) type_of[size_t(a.id)] = a.special ? kTypeControl : kTypeUserDefined;
  for (size_t i = 0; i < spec.tokens.size(); ++i) {
    // NOTE: an id no entry names gets a unique placeholder, as convert_hf_to_gguf.py's [PAD<id>].
    tokens->items.emplace_back(spec.tokens[i].empty() ? "[PAD" + std::to_string(i) + "]" : spec.tokens[i]);
    types->items.emplace_back(spec.tokens[i].empty() ? kTypeUnused : type_of[i]);
  }
  for (const auto& [a, b] : spec.merges) merges->items.emplace_back(a + " " + b);
  w.set("tokenizer.ggml.model", std::string("gpt2"));
  w.set("tokenizer.ggml.pre", spec.gguf_pre);
  w.set("tokenizer.ggml.tokens", tokens);
  w.set("tokenizer.ggml.token_type", types);
  w.set("tokenizer.ggml.merges", merges);
  if (spec.bos_id >= 0) w.set("tokenizer.ggml.bos_token_id", uint64_t(spec.bos_id));
  if (spec.eos_id >= 0) w.set("tokenizer.ggml.eos_token_id", uint64_t(spec.eos_id));
  const bool add_bos = !spec.prefix_ids.empty(), add_eos = !spec.suffix_ids.empty();
  if ((add_bos && spec.prefix_ids != std::vector<int32_t>{spec.bos_id}) ||
      (add_eos && spec.suffix_ids != std::vector<int32_t>{spec.eos_id}))
    throw std::invalid_argument("--format gguf: the tokenizer adds special tokens other than BOS / EOS around a text");
  w.set("tokenizer.ggml.add_bos_token", add_bos);
  w.set("tokenizer.ggml.add_eos_token", add_eos);
  if (!vocab.chat_template.empty()) w.set("tokenizer.chat_template", vocab.chat_template);
}

GgufWriter make_writer(const ModelShape& s, const WeightTypes& dtype, uint64_t seed, const RealVocab* vocab) {
  check_shape(s);
  const int head_dim = s.head_size();
  // Mistral files say llama (llama.cpp's converter), with the window as a key.
  const std::string arch = s.architecture == "mistral" ? "llama" : s.architecture;
  GgufWriter w;
  w.set("general.architecture", arch);
  w.set("general.name", s.name);
  w.set("general.file_type", dtype.file_type());
  w.set(arch + ".context_length", uint64_t(s.max_seq_len));
  w.set(arch + ".embedding_length", uint64_t(s.dim));
  w.set(arch + ".block_count", uint64_t(s.num_layers));
  w.set(arch + ".feed_forward_length", uint64_t(s.ffn_dim));
  w.set(arch + ".attention.head_count", uint64_t(s.num_q_heads));
  w.set(arch + ".attention.head_count_kv", uint64_t(s.num_kv_heads));
  w.set(arch + ".attention.key_length", uint64_t(head_dim));
  w.set(arch + ".attention.value_length", uint64_t(head_dim));
  w.set(arch + ".attention.layer_norm_rms_epsilon", double(s.rms_eps));
  w.set(arch + ".rope.dimension_count", uint64_t(head_dim));
  w.set(arch + ".rope.freq_base", s.rope_theta);
  if (s.rope_scaling == "linear" || s.rope_scaling == "yarn") {  // llama3: the rope_freqs.weight tensor
    w.set(arch + ".rope.scaling.type", s.rope_scaling);
    w.set(arch + ".rope.scaling.factor", double(s.rope_factor));
    if (s.rope_scaling == "yarn") w.set(arch + ".rope.scaling.original_context_length", uint64_t(s.rope_original_context));
  }
  if (s.sliding_window > 0) w.set(arch + ".attention.sliding_window", uint64_t(s.sliding_window));
  w.set(arch + ".vocab_size", uint64_t(s.vocab_size));
  if (vocab) add_bpe_vocab(w, *vocab);
  else add_vocab(w, s.vocab_size);
  for_each_random_tensor(s, dtype, seed, [&](RandomTensor t) { w.add_tensor(t.name, t.ne, t.dtype, std::move(t.fill)); });
  return w;
}

}  // namespace

void for_each_random_tensor(const ModelShape& s, const WeightTypes& types, uint64_t seed,
                            const std::function<void(RandomTensor)>& add) {
  check_shape(s);
  const int head_dim = s.head_size();
  const int q_dim = s.num_q_heads * head_dim;
  const int kv_dim = s.num_kv_heads * head_dim;
  const uint64_t seed_key = splitmix64(seed);
  // A weight [rows (out), cols (in)]: GGUF ne = {cols, rows}.
  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols, float std) {
    const kernels::DType dtype = types.matrix_dtype(name, s.num_layers, cols);
    const RandomMatrix m{splitmix64(seed_key ^ fnv1a(name)), std, rows, cols, dtype};
    add({name, {cols, rows}, dtype, [m](uint8_t* dst) { m.write(dst); }});
  };
  auto ones = [&](const std::string& name, int64_t n) {
    add({name, {n}, kernels::DType::F32, [n](uint8_t* dst) {
           const float one = 1.0f;
           for (int64_t i = 0; i < n; ++i) std::memcpy(dst + 4 * i, &one, 4);
         }});
  };
  // An F32 vector [n]: mean + uniform values of standard deviation `std`.
  auto vector = [&](const std::string& name, int64_t n, float mean, float std) {
    const RandomMatrix m{splitmix64(seed_key ^ fnv1a(name)), std, 1, n, kernels::DType::F32};
    add({name, {n}, kernels::DType::F32, [m, mean](uint8_t* dst) {
           std::vector<float> v(size_t(m.cols));
           m.fill_row_f32(0, v.data());
           for (float& x : v) x += mean;
           std::memcpy(dst, v.data(), v.size() * 4);
         }});
  };
  auto fan_in = [](int64_t n) { return 1.0f / std::sqrt(float(n)); };
  // Tied: the embedding is also the output projection, so it gets the projection's std; std 1 would make
  // each token's own logit dominate (the residual stream starts as its embedding).
  matrix("token_embd.weight", s.vocab_size, s.dim, s.tied ? fan_in(s.dim) : 1.0f);
  if (s.rope_scaling == "llama3") {
    std::vector<float> factors(size_t(head_dim / 2));
    kernels::llama3_rope_freq_factors(float(s.rope_theta), head_dim, s.rope_factor, s.rope_low_freq_factor,
                                      s.rope_high_freq_factor, s.rope_original_context, factors.data());
    add({"rope_freqs.weight", {int64_t(factors.size())}, kernels::DType::F32,
         [factors](uint8_t* dst) { std::memcpy(dst, factors.data(), factors.size() * 4); }});
  }
  for (int i = 0; i < s.num_layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    ones(p + "attn_norm.weight", s.dim);
    matrix(p + "attn_q.weight", q_dim, s.dim, fan_in(s.dim));
    matrix(p + "attn_k.weight", kv_dim, s.dim, fan_in(s.dim));
    matrix(p + "attn_v.weight", kv_dim, s.dim, fan_in(s.dim));
    if (s.qkv_bias()) {
      vector(p + "attn_q.bias", q_dim, 0.0f, 0.5f);
      vector(p + "attn_k.bias", kv_dim, 0.0f, 0.5f);
      vector(p + "attn_v.bias", kv_dim, 0.0f, 0.5f);
    }
    if (s.qk_norm()) {
      vector(p + "attn_q_norm.weight", head_dim, 1.0f, 0.2f);
      vector(p + "attn_k_norm.weight", head_dim, 1.0f, 0.2f);
    }
    matrix(p + "attn_output.weight", s.dim, q_dim, fan_in(q_dim));
    ones(p + "ffn_norm.weight", s.dim);
    matrix(p + "ffn_gate.weight", s.ffn_dim, s.dim, fan_in(s.dim));
    matrix(p + "ffn_up.weight", s.ffn_dim, s.dim, fan_in(s.dim));
    matrix(p + "ffn_down.weight", s.dim, s.ffn_dim, fan_in(s.ffn_dim));
  }
  ones("output_norm.weight", s.dim);
  if (!s.tied) matrix("output.weight", s.vocab_size, s.dim, fan_in(s.dim));
}

const std::vector<ModelShape>& model_presets() {
  static const std::vector<ModelShape> presets = [] {
    std::vector<ModelShape> v = {
        // name, dim, layers, q heads, kv heads, ffn, vocab, context
        {"tiny", 128, 4, 8, 2, 384, 512, 2048},
        {"smollm-135m", 576, 30, 9, 3, 1536, 49152, 2048},
        {"tinyllama-1.1b", 2048, 22, 32, 4, 5632, 32000, 2048},
    };
    // The real models' dimensions (their config.json).
    ModelShape qwen25{"qwen2.5-0.5b", 896, 24, 14, 2, 4864, 151936, 32768};
    qwen25.architecture = "qwen2";
    qwen25.rms_eps = 1e-6f;
    qwen25.rope_theta = 1000000.0;
    qwen25.tied = true;
    ModelShape qwen3{"qwen3-0.6b", 1024, 28, 16, 8, 3072, 151936, 40960};
    qwen3.architecture = "qwen3";
    qwen3.head_dim = 128;
    qwen3.rms_eps = 1e-6f;
    qwen3.rope_theta = 1000000.0;
    qwen3.tied = true;
    ModelShape llama32{"llama3.2-1b", 2048, 16, 32, 8, 8192, 128256, 131072};
    llama32.rope_theta = 500000.0;
    llama32.rope_scaling = "llama3";
    llama32.rope_factor = 32.0f;
    llama32.rope_original_context = 8192;
    llama32.tied = true;
    v.insert(v.end(), {qwen25, qwen3, llama32});
    // Small shapes of each architecture for tests: 2 layers, dims multiples of 256, and the scaling
    // parameters chosen so that every branch of each formula is taken at head_dim 64 or 128.
    ModelShape llama3s{"llama3-small", 256, 2, 4, 2, 512, 512, 2048};
    llama3s.rope_theta = 500000.0;
    llama3s.rope_scaling = "llama3";
    llama3s.rope_factor = 8.0f;
    llama3s.rope_original_context = 64;
    ModelShape qwen2s{"qwen2-small", 256, 2, 4, 2, 512, 512, 2048};
    qwen2s.architecture = "qwen2";
    qwen2s.rms_eps = 1e-6f;
    qwen2s.rope_theta = 1000000.0;
    qwen2s.tied = true;
    ModelShape qwen3s{"qwen3-small", 256, 2, 4, 2, 512, 512, 2048};
    qwen3s.architecture = "qwen3";
    qwen3s.head_dim = 128;
    qwen3s.rms_eps = 1e-6f;
    qwen3s.rope_theta = 1000000.0;
    qwen3s.rope_scaling = "yarn";
    qwen3s.rope_factor = 4.0f;
    qwen3s.rope_original_context = 512;  // = context / factor: transformers and llama.cpp read the same factor
    qwen3s.tied = true;
    ModelShape mistrals{"mistral-small", 256, 2, 4, 2, 512, 512, 2048};
    mistrals.architecture = "mistral";
    mistrals.sliding_window = 8;
    mistrals.rope_scaling = "linear";
    mistrals.rope_factor = 2.0f;
    v.insert(v.end(), {llama3s, qwen2s, qwen3s, mistrals});
    return v;
  }();
  return presets;
}

const ModelShape* find_preset(const std::string& name) {
  for (const ModelShape& s : model_presets())
    if (s.name == name) return &s;
  return nullptr;
}

void write_random_model(const std::string& path, const ModelShape& shape, const WeightTypes& dtype, uint64_t seed,
                        const RealVocab* vocab) {
  make_writer(shape, dtype, seed, vocab).write_file(path);
}

std::vector<uint8_t> random_model_gguf(const ModelShape& shape, const WeightTypes& dtype, uint64_t seed) {
  return make_writer(shape, dtype, seed, nullptr).write_memory();
}

}  // namespace inflight::engine

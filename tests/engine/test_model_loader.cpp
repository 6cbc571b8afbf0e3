// load_model on stories260K in both layouts (config values, bit-identical weights up to the README's
// q/k permutation) and on broken copies, each a LoadError naming the file and the tensor or key.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>

#include "engine/builtin_model.h"
#include "engine/model.h"
#include "engine/model_loader.h"
#include "loader_test_support.h"

using namespace inflight;
using engine::GgufFile;
using engine::GgufWriter;
using engine::LoadedModel;
using engine::ModelConfig;
using kernels::DType;
using kernels::WeightMatrix;

namespace {

const float* row_of(const WeightMatrix& w, int64_t r) {
  REQUIRE(w.dtype == DType::F32);
  return static_cast<const float*>(w.data) + r * w.cols;
}

bool same_bytes(const WeightMatrix& a, const WeightMatrix& b) {
  return a.rows == b.rows && a.cols == b.cols && a.dtype == b.dtype &&
         std::memcmp(a.data, b.data, size_t(a.rows * kernels::row_bytes(a.dtype, a.cols))) == 0;
}

// HF row of GGUF row (head h, pair i, element j of the pair): the permutation
// w.view(n, head_dim/2, 2, dim).transpose(1, 2) puts it at h*head_dim + j*head_dim/2 + i.
int64_t hf_row(int64_t gguf_row, int head_dim) {
  const int64_t h = gguf_row / head_dim, within = gguf_row % head_dim;
  return h * head_dim + (within % 2) * (head_dim / 2) + within / 2;
}

void check_stories_config(const ModelConfig& c) {
  CHECK(c.architecture == "llama");
  CHECK(c.dim == 64);
  CHECK(c.num_layers == 5);
  CHECK(c.num_q_heads == 8);
  CHECK(c.num_kv_heads == 4);
  CHECK(c.head_dim == 8);
  CHECK(c.rotary_dim == 8);
  CHECK(c.ffn_dim == 172);
  CHECK(c.vocab_size == 512);
  CHECK(c.max_seq_len == 512);
  CHECK(c.rms_eps == doctest::Approx(1e-5f));
  CHECK(c.rope_theta == 10000.0f);
  CHECK(c.tied_embeddings);
  CHECK(c.bos_id == 1);
  CHECK(c.eos_id == 2);
}

// Writes `w` to dir/name and returns the LoadError message of loading it.
std::string gguf_error(const test::TempDir& dir, const GgufWriter& w, const std::string& name = "broken.gguf") {
  const std::string path = dir / name;
  w.write_file(path);
  const std::string msg = test::load_error_message([&] { engine::load_model(path); });
  CHECK_MESSAGE(test::contains(msg, path), msg);
  return msg;
}

void write_config(const std::filesystem::path& dir, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = nlohmann::json::parse(std::ifstream(test::stories_dir() / "hf" / "config.json"));
  edit(j);
  std::ofstream(dir / "config.json") << j.dump(2);
}

// Rewrites dir/model.safetensors with `edit` applied to the stories tensors.
void rewrite_safetensors(const std::filesystem::path& dir, const std::function<void(std::vector<test::RawTensor>&)>& edit) {
  auto tensors = test::read_raw_tensors((test::stories_dir() / "hf" / "model.safetensors").string());
  edit(tensors);
  test::write_bytes(dir / "model.safetensors", test::safetensors_bytes(tensors));
}

test::RawTensor& find_raw(std::vector<test::RawTensor>& ts, const std::string& name) {
  for (auto& t : ts)
    if (t.name == name) return t;
  FAIL("no tensor " << name);
  return ts.front();
}

}  // namespace

TEST_SUITE("model_loader") {

TEST_CASE("model_loader stories260K GGUF: config, GPT-J RoPE, tied output, tokenizer") {
  const LoadedModel m = engine::load_model(test::stories_gguf());
  check_stories_config(m.weights.config);
  CHECK(m.weights.config.rope_style == kernels::RopeStyle::GptJ);
  CHECK(m.weights.output.data == m.weights.token_embd.data);  // output.weight is a copy: tied
  CHECK(m.weights.token_embd.rows == 512);
  CHECK(m.weights.token_embd.cols == 64);
  REQUIRE(m.weights.layers.size() == 5);
  CHECK(m.weights.layers[0].wk.rows == 32);
  CHECK(m.weights.layers[0].w_down.cols == 172);
  CHECK(m.weights.layers[4].attn_norm.size() == 64);
  CHECK(m.weights.output_norm.size() == 64);
  CHECK(m.tokenizer.vocab_size() == 512);
  CHECK(m.tokenizer.bos_id() == 1);
  CHECK(m.tokenizer.add_bos());
}

TEST_CASE("model_loader stories260K HF folder: config, NeoX RoPE, same weights as GGUF up to the q/k permutation") {
  const LoadedModel hf = engine::load_model(test::stories_hf());
  const LoadedModel gg = engine::load_model(test::stories_gguf());
  check_stories_config(hf.weights.config);
  CHECK(hf.weights.config.rope_style == kernels::RopeStyle::NeoX);
  CHECK(hf.weights.config.name == "hf");
  CHECK(hf.weights.output.data == hf.weights.token_embd.data);
  CHECK(hf.tokenizer.vocab_size() == 512);

  CHECK(same_bytes(hf.weights.token_embd, gg.weights.token_embd));
  CHECK(hf.weights.output_norm == gg.weights.output_norm);
  for (int l = 0; l < 5; ++l) {
    CAPTURE(l);
    const auto& h = hf.weights.layers[size_t(l)];
    const auto& g = gg.weights.layers[size_t(l)];
    CHECK(h.attn_norm == g.attn_norm);
    CHECK(h.ffn_norm == g.ffn_norm);
    CHECK(same_bytes(h.wv, g.wv));
    CHECK(same_bytes(h.wo, g.wo));
    CHECK(same_bytes(h.w_gate, g.w_gate));
    CHECK(same_bytes(h.w_up, g.w_up));
    CHECK(same_bytes(h.w_down, g.w_down));
    CHECK_FALSE(same_bytes(h.wq, g.wq));  // permuted
    for (const auto& [hw, gw] : {std::pair{&h.wq, &g.wq}, std::pair{&h.wk, &g.wk}}) {
      REQUIRE(hw->rows == gw->rows);
      for (int64_t r = 0; r < gw->rows; ++r)
        CHECK(std::memcmp(row_of(*gw, r), row_of(*hw, hf_row(r, 8)), 64 * 4) == 0);
    }
  }
}

TEST_CASE("model_loader GGUF output: untied when it differs from the embedding, tied when absent") {
  test::TempDir dir("loader-tie");
  const GgufFile g = GgufFile::open(test::stories_gguf());
  std::vector<float> other(512 * 64, 0.5f);
  GgufWriter w = test::rewrite_gguf(g, {"output.weight"});
  w.add_tensor("output.weight", {64, 512}, DType::F32, [&](uint8_t* dst) { std::memcpy(dst, other.data(), other.size() * 4); });
  w.write_file(dir / "untied.gguf");
  const LoadedModel untied = engine::load_model(dir / "untied.gguf");
  CHECK_FALSE(untied.weights.config.tied_embeddings);
  CHECK(row_of(untied.weights.output, 511)[63] == 0.5f);

  test::rewrite_gguf(g, {"output.weight"}).write_file(dir / "tied.gguf");
  const LoadedModel tied = engine::load_model(dir / "tied.gguf");
  CHECK(tied.weights.config.tied_embeddings);
  CHECK(tied.weights.output.data == tied.weights.token_embd.data);
}

TEST_CASE("model_loader broken GGUF copies are LoadErrors naming the file and the tensor or key") {
  test::TempDir dir("loader-gguf");
  const GgufFile g = GgufFile::open(test::stories_gguf());

  SUBCASE("missing tensor") {
    const std::string msg = gguf_error(dir, test::rewrite_gguf(g, {"blk.3.ffn_up.weight"}));
    CHECK_MESSAGE(test::contains(msg, "missing tensor blk.3.ffn_up.weight"), msg);
  }
  SUBCASE("wrong shape") {
    GgufWriter w = test::rewrite_gguf(g, {"blk.1.attn_k.weight"});
    const auto* k = g.find_tensor("blk.1.attn_k.weight");
    w.add_tensor("blk.1.attn_k.weight", {64, 16}, DType::F32, [k](uint8_t* dst) { std::memcpy(dst, k->data, 64 * 16 * 4); });
    const std::string msg = gguf_error(dir, w);
    CHECK_MESSAGE(test::contains(msg, "blk.1.attn_k.weight"), msg);
    CHECK_MESSAGE(test::contains(msg, "[64, 16]"), msg);
    CHECK_MESSAGE(test::contains(msg, "expected ne [64, 32]"), msg);
  }
  SUBCASE("wrong norm length") {
    GgufWriter w = test::rewrite_gguf(g, {"output_norm.weight"});
    w.add_tensor("output_norm.weight", {63}, DType::F32, [](uint8_t* dst) { std::memset(dst, 0, 63 * 4); });
    CHECK(test::contains(gguf_error(dir, w), "output_norm.weight"));
  }
  SUBCASE("unsupported architecture") {
    GgufWriter w = test::rewrite_gguf(g);
    w.set("general.architecture", std::string("gpt2"));
    CHECK(test::contains(gguf_error(dir, w), "unsupported architecture gpt2"));
  }
  SUBCASE("unsupported tokenizer") {
    GgufWriter w = test::rewrite_gguf(g);
    w.set("tokenizer.ggml.model", std::string("bert"));
    CHECK(test::contains(gguf_error(dir, w), "unsupported tokenizer bert"));
    w.set("tokenizer.ggml.model", std::string("gpt2"));  // BPE needs its merges
    CHECK(test::contains(gguf_error(dir, w), "tokenizer.ggml.merges"));
  }
  SUBCASE("a block count far past the tensors the file holds") {
    // Once the loader made room for every claimed layer before binding one:
    // (16 million empty layers, gigabytes and seconds before the first error; found by fuzzing). Now the first missing layer is the error.
    GgufWriter w = test::rewrite_gguf(g);
    w.set("llama.block_count", uint64_t(16000000));
    const std::string msg = gguf_error(dir, w);
    CHECK_MESSAGE(test::contains(msg, "missing tensor blk.5.attn_norm.weight"), msg);
  }
  SUBCASE("missing and bad keys") {
    CHECK(test::contains(gguf_error(dir, test::rewrite_gguf(g, {"llama.block_count"})), "missing key llama.block_count"));
    CHECK(test::contains(gguf_error(dir, test::rewrite_gguf(g, {"general.architecture"})), "general.architecture"));
    CHECK(test::contains(gguf_error(dir, test::rewrite_gguf(g, {"tokenizer.ggml.tokens"})), "tokenizer.ggml.tokens"));
    GgufWriter w = test::rewrite_gguf(g);
    w.set("llama.attention.head_count_kv", uint64_t(3));
    CHECK(test::contains(gguf_error(dir, w), "num_kv_heads"));
    w = test::rewrite_gguf(g);
    w.set("llama.embedding_length", std::string("64"));
    CHECK(test::contains(gguf_error(dir, w), "llama.embedding_length"));
    w = test::rewrite_gguf(g);
    w.set("llama.rope.dimension_count", uint64_t(7));
    CHECK(test::contains(gguf_error(dir, w), "rotary_dim"));
    w = test::rewrite_gguf(g);
    w.set("tokenizer.ggml.bos_token_id", uint64_t(9999));
    CHECK(test::contains(gguf_error(dir, w), "tokenizer.ggml.bos_token_id"));
  }
  SUBCASE("optional keys take their defaults") {
    test::rewrite_gguf(g, {"llama.vocab_size", "llama.rope.freq_base", "llama.rope.dimension_count"})
        .write_file(dir / "defaults.gguf");
    const LoadedModel m = engine::load_model(dir / "defaults.gguf");
    CHECK(m.weights.config.vocab_size == 512);  // from token_embd
    CHECK(m.weights.config.rope_theta == 10000.0f);
    CHECK(m.weights.config.rotary_dim == 8);
    // head_count_kv defaults to head_count (no GQA): stories' attn_k then has the wrong shape.
    const std::string msg = gguf_error(dir, test::rewrite_gguf(g, {"llama.attention.head_count_kv"}));
    CHECK_MESSAGE(test::contains(msg, "blk.0.attn_k.weight has ne [64, 32], expected ne [64, 64]"), msg);
  }
  SUBCASE("truncated at several lengths") {
    const auto bytes = test::read_bytes(test::stories_gguf());
    for (size_t len : {size_t(0), size_t(16), size_t(5000), bytes.size() / 3, bytes.size() - 1}) {
      CAPTURE(len);
      const std::string path = dir / "cut.gguf";
      test::write_bytes(path, std::vector<uint8_t>(bytes.begin(), bytes.begin() + long(len)));
      CHECK(test::contains(test::load_error_message([&] { engine::load_model(path); }), path));
    }
  }
  SUBCASE("missing file") {
    CHECK(test::contains(test::load_error_message([&] { engine::load_model(dir / "absent.gguf"); }), "absent.gguf"));
  }
}

TEST_CASE("model_loader model families: unsupported architectures, rope scalings and tensors are refused by name") {
  test::TempDir dir("loader-families");
  const auto qwen3 = engine::random_model_gguf(*engine::find_preset("qwen3-small"), DType::F32, 3);
  const GgufFile g = GgufFile::from_memory(std::make_shared<const std::vector<uint8_t>>(qwen3), "qwen3.gguf");
  SUBCASE("the qwen3 file loads with its parts") {
    const LoadedModel m = engine::load_gguf_model(std::make_shared<const std::vector<uint8_t>>(qwen3), "q.gguf");
    const engine::ModelConfig& c = m.weights.config;
    CHECK((c.architecture == "qwen3" && c.qk_norm && !c.qkv_bias && c.head_dim == 128 && c.q_dim() == 512));
    CHECK(c.rope_style == kernels::RopeStyle::NeoX);
    CHECK(c.rope_scaling == kernels::RopeScaling::Yarn);
    CHECK(c.rope_original_context == 512);
    CHECK(c.rope_attn_factor == doctest::Approx(1.0 + 0.1 * std::log(4.0)));
    CHECK(c.tied_embeddings);
    CHECK(m.weights.layers[1].k_norm.size() == 128);
  }
  SUBCASE("a scaling factor without a type is linear scaling, as llama.cpp reads it") {
    test::rewrite_gguf(g, {"qwen3.rope.scaling.type"}).write_file(dir / "untyped.gguf");
    const LoadedModel m = engine::load_model(dir / "untyped.gguf");
    CHECK(m.weights.config.rope_scaling == kernels::RopeScaling::Linear);
    CHECK(m.weights.config.rope_factor == 4.0f);
    CHECK(m.weights.config.rope_attn_factor == 1.0f);
  }
  SUBCASE("gemma architecture") {
    GgufWriter w = test::rewrite_gguf(g);
    w.set("general.architecture", std::string("gemma"));
    const std::string msg = gguf_error(dir, w);
    CHECK_MESSAGE(test::contains(msg, "key general.architecture: unsupported architecture gemma"), msg);
  }
  SUBCASE("longrope scaling") {
    GgufWriter w = test::rewrite_gguf(g);
    w.set("qwen3.rope.scaling.type", std::string("longrope"));
    const std::string msg = gguf_error(dir, w);
    CHECK_MESSAGE(test::contains(msg, "key qwen3.rope.scaling.type: unsupported rope scaling longrope"), msg);
  }
  SUBCASE("a q/k norm missing, a bias the architecture lacks") {
    CHECK(test::contains(gguf_error(dir, test::rewrite_gguf(g, {"blk.1.attn_k_norm.weight"})),
                         "missing tensor blk.1.attn_k_norm.weight"));
    GgufWriter w = test::rewrite_gguf(g);
    w.add_tensor("blk.0.attn_output.bias", {256}, DType::F32, [](uint8_t* dst) { std::memset(dst, 0, 256 * 4); });
    CHECK(test::contains(gguf_error(dir, w), "unsupported tensor blk.0.attn_output.bias"));
    w = test::rewrite_gguf(g);
    w.add_tensor("blk.1.ffn_down.bias", {256}, DType::F32, [](uint8_t* dst) { std::memset(dst, 0, 256 * 4); });
    CHECK(test::contains(gguf_error(dir, w), "unsupported tensor blk.1.ffn_down.bias"));
    w = test::rewrite_gguf(g);
    w.add_tensor("output.bias", {512}, DType::F32, [](uint8_t* dst) { std::memset(dst, 0, 512 * 4); });
    CHECK(test::contains(gguf_error(dir, w), "unsupported tensor output.bias"));
  }
  SUBCASE("rope_freqs.weight of the wrong length") {
    const auto llama3 = engine::random_model_gguf(*engine::find_preset("llama3-small"), DType::F32, 3);
    const GgufFile l3 = GgufFile::from_memory(std::make_shared<const std::vector<uint8_t>>(llama3), "l3.gguf");
    GgufWriter w3 = test::rewrite_gguf(l3, {"rope_freqs.weight"});
    w3.add_tensor("rope_freqs.weight", {5}, DType::F32, [](uint8_t* dst) { std::memset(dst, 0, 5 * 4); });
    const std::string msg3 = gguf_error(dir, w3);
    CHECK_MESSAGE(test::contains(msg3, "rope_freqs.weight has ne [5], expected ne [32]"), msg3);
  }
  SUBCASE("llama with q/k norm tensors") {
    GgufWriter w = test::rewrite_gguf(g);
    w.set("general.architecture", std::string("llama"));
    for (const auto& [key, value] : g.metadata())
      if (key.starts_with("qwen3.")) w.set("llama." + key.substr(6), value);
    const std::string msg = gguf_error(dir, w);  // llama has no q/k norm
    CHECK_MESSAGE(test::contains(msg, "unsupported tensor blk.0.attn_q_norm.weight"), msg);
  }
  SUBCASE("HF rope_scaling types and Qwen's per-layer windows") {
    test::copy_stories_hf(dir.path);
    const std::string folder = dir.path.string();
    auto hf_error = [&] { return test::load_error_message([&] { engine::load_model(folder); }); };
    write_config(dir.path, [](nlohmann::json& j) { j["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}}; });
    CHECK(test::contains(hf_error(), "key rope_scaling: unsupported rope scaling type dynamic"));
    write_config(dir.path, [](nlohmann::json& j) { j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}}; });
    CHECK(test::contains(hf_error(), "rope_scaling.original_max_position_embeddings"));
    write_config(dir.path, [](nlohmann::json& j) {
      j["model_type"] = "qwen3";
      j["use_sliding_window"] = true;
    });
    CHECK(test::contains(hf_error(), "key use_sliding_window"));
    write_config(dir.path, [](nlohmann::json& j) { j["model_type"] = "qwen2"; });  // stories has no biases
    CHECK(test::contains(hf_error(), "missing tensor model.layers.0.self_attn.q_proj.bias"));
    write_config(dir.path, [](nlohmann::json& j) { j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 4.0}}; });
    const LoadedModel m = engine::load_model(folder);
    CHECK(m.weights.config.rope_scaling == kernels::RopeScaling::Linear);
    CHECK(m.weights.config.rope_factor == 4.0f);
  }
}

TEST_CASE("model_loader broken HF folders are LoadErrors naming the file and the tensor or key") {
  test::TempDir dir("loader-hf");
  test::copy_stories_hf(dir.path);
  const std::string folder = dir.path.string();
  auto error = [&] { return test::load_error_message([&] { engine::load_model(folder); }); };

  SUBCASE("unsupported architecture") {
    write_config(dir.path, [](nlohmann::json& j) {
      j["model_type"] = "gpt_neox";
      j["architectures"] = {"GPTNeoXForCausalLM"};
    });
    const std::string msg = error();
    CHECK_MESSAGE(test::contains(msg, "unsupported architecture gpt_neox"), msg);
    CHECK_MESSAGE(test::contains(msg, "config.json"), msg);
  }
  SUBCASE("mistral with a sliding window") {
    write_config(dir.path, [](nlohmann::json& j) {
      j["model_type"] = "mistral";
      j["architectures"] = {"MistralForCausalLM"};
      j["sliding_window"] = 128;
    });
    const LoadedModel m = engine::load_model(folder);
    CHECK(m.weights.config.sliding_window == 128);  // the band mask; the context stays the trained one
    CHECK(m.weights.config.max_seq_len == 512);
    CHECK(m.weights.config.architecture == "mistral");
    CHECK(m.weights.config.rope_style == kernels::RopeStyle::NeoX);
  }
  SUBCASE("missing config.json") {
    std::filesystem::remove(dir.path / "config.json");
    CHECK(test::contains(error(), dir / "config.json"));
  }
  SUBCASE("bad config.json") {
    std::ofstream(dir.path / "config.json") << "{\"hidden_size\": ";
    CHECK(test::contains(error(), "config.json"));
    write_config(dir.path, [](nlohmann::json& j) { j["num_hidden_layers"] = "five"; });
    CHECK(test::contains(error(), "num_hidden_layers"));
    write_config(dir.path, [](nlohmann::json& j) { j.erase("hidden_size"); });
    CHECK(test::contains(error(), "missing key hidden_size"));
    write_config(dir.path, [](nlohmann::json& j) { j["rope_scaling"] = {{"rope_type", "yarn"}}; });
    CHECK(test::contains(error(), "rope_scaling"));
  }
  SUBCASE("missing tokenizer.model") {
    std::filesystem::remove(dir.path / "tokenizer.model");
    CHECK(test::contains(error(), "no tokenizer.json or tokenizer.model"));
  }
  SUBCASE("unsupported dtype") {
    rewrite_safetensors(dir.path, [](std::vector<test::RawTensor>& ts) {
      test::RawTensor& q = find_raw(ts, "model.layers.2.self_attn.q_proj.weight");
      std::vector<uint8_t> f64(q.bytes.size() * 2);
      for (size_t i = 0; i < q.bytes.size() / 4; ++i) {
        float f;
        std::memcpy(&f, q.bytes.data() + 4 * i, 4);
        const double d = f;
        std::memcpy(f64.data() + 8 * i, &d, 8);
      }
      q.dtype = "F64";
      q.bytes = std::move(f64);
    });
    const std::string msg = error();
    CHECK_MESSAGE(test::contains(msg, "model.layers.2.self_attn.q_proj.weight"), msg);
    CHECK_MESSAGE(test::contains(msg, "F64"), msg);
    CHECK_MESSAGE(test::contains(msg, dir / "model.safetensors"), msg);
  }
  SUBCASE("wrong shape") {
    rewrite_safetensors(dir.path, [](std::vector<test::RawTensor>& ts) {
      test::RawTensor& k = find_raw(ts, "model.layers.0.self_attn.k_proj.weight");
      k.shape = {64, 32};
    });
    const std::string msg = error();
    CHECK_MESSAGE(test::contains(msg, "model.layers.0.self_attn.k_proj.weight"), msg);
    CHECK_MESSAGE(test::contains(msg, "shape [64, 32], expected shape [32, 64]"), msg);
  }
  SUBCASE("missing tensor") {
    rewrite_safetensors(dir.path, [](std::vector<test::RawTensor>& ts) {
      ts.erase(std::find_if(ts.begin(), ts.end(), [](const auto& t) { return t.name == "model.layers.4.mlp.down_proj.weight"; }));
    });
    const std::string msg = error();
    CHECK_MESSAGE(test::contains(msg, "missing tensor model.layers.4.mlp.down_proj.weight"), msg);
    CHECK_MESSAGE(test::contains(msg, folder), msg);
  }
  SUBCASE("unaligned tensor data is copied to aligned memory") {
    rewrite_safetensors(dir.path, [](std::vector<test::RawTensor>& ts) {
      ts.insert(ts.begin(), test::RawTensor{"extra.bias", "F16", {1}, {0, 0x3c}});  // shifts the rest by 2 bytes
    });
    const LoadedModel m = engine::load_model(folder);
    const LoadedModel ref = engine::load_model(test::stories_hf());
    const auto& wq = m.weights.layers[0].wq;
    CHECK(reinterpret_cast<uintptr_t>(wq.data) % 4 == 0);
    CHECK(same_bytes(wq, ref.weights.layers[0].wq));
    CHECK(same_bytes(m.weights.token_embd, ref.weights.token_embd));
    CHECK(m.weights.layers[0].attn_norm == ref.weights.layers[0].attn_norm);
  }
  SUBCASE("untied without lm_head is tied") {
    write_config(dir.path, [](nlohmann::json& j) { j["tie_word_embeddings"] = false; });
    rewrite_safetensors(dir.path, [](std::vector<test::RawTensor>& ts) {
      ts.erase(std::find_if(ts.begin(), ts.end(), [](const auto& t) { return t.name == "lm_head.weight"; }));
    });
    const LoadedModel m = engine::load_model(folder);
    CHECK(m.weights.config.tied_embeddings);
    CHECK(m.weights.output.data == m.weights.token_embd.data);
  }
}

TEST_CASE("model_loader HF folder with BF16 weights: BF16 matrix views, norms converted to f32") {
  test::TempDir dir("loader-bf16");
  test::copy_stories_hf(dir.path);
  rewrite_safetensors(dir.path, [](std::vector<test::RawTensor>& ts) {
    for (test::RawTensor& t : ts) {
      std::vector<uint8_t> half(t.bytes.size() / 2);
      for (size_t i = 0; i < t.bytes.size() / 4; ++i) {
        float f;
        std::memcpy(&f, t.bytes.data() + 4 * i, 4);
        const uint16_t h = kernels::f32_to_bf16(f);
        std::memcpy(half.data() + 2 * i, &h, 2);
      }
      t.dtype = "BF16";
      t.bytes = std::move(half);
    }
  });
  const LoadedModel bf = engine::load_model(dir.path.string());
  const LoadedModel f32 = engine::load_model(test::stories_hf());
  CHECK(bf.weights.layers[1].wq.dtype == DType::BF16);
  CHECK(bf.weights.token_embd.dtype == DType::BF16);
  const auto& norm = bf.weights.layers[3].ffn_norm;
  REQUIRE(norm.size() == 64);
  for (size_t i = 0; i < 64; ++i)
    CHECK(norm[i] == kernels::bf16_to_f32(kernels::f32_to_bf16(f32.weights.layers[3].ffn_norm[i])));
  // Interleaved in place by the loader where this CPU's kernels read BF16 so (AVX-512), read back by row.
  CHECK(bf.weights.layers[1].wq.interleaved == kernels::interleaving_pays({DType::BF16, nullptr, 64, 64}));
  std::vector<float> row(64);
  kernels::matrix_row(bf.weights.layers[1].wq, 5, row.data());
  for (int i = 0; i < 64; ++i) CHECK(row[size_t(i)] == doctest::Approx(row_of(f32.weights.layers[1].wq, 5)[i]).epsilon(1e-2));
  // Model adds no copy of weights the loader has rearranged already.
  const engine::Model model(bf.weights);
  CHECK(model.weights().storage.size() == bf.weights.storage.size());
}

TEST_CASE("model_loader validate rejects inconsistent configs") {
  ModelConfig c;
  c.architecture = "llama";
  c.dim = 64;
  c.num_layers = 2;
  c.num_q_heads = 8;
  c.num_kv_heads = 4;
  c.head_dim = 8;
  c.rotary_dim = 8;
  c.ffn_dim = 128;
  c.vocab_size = 100;
  c.max_seq_len = 64;
  CHECK_NOTHROW(engine::validate(c, "cfg"));
  auto message = [](ModelConfig bad) { return test::load_error_message([&] { engine::validate(bad, "cfg.json"); }); };
  ModelConfig bad = c;
  bad.num_kv_heads = 3;
  CHECK(test::contains(message(bad), "cfg.json"));
  bad = c;
  bad.rotary_dim = 10;
  CHECK(test::contains(message(bad), "rotary_dim"));
  bad = c;
  bad.rotary_dim = 5;
  CHECK(test::contains(message(bad), "rotary_dim"));
  bad = c;
  bad.dim = 0;
  CHECK(test::contains(message(bad), "dim"));
  bad = c;
  bad.rms_eps = -1.0f;
  CHECK(test::contains(message(bad), "rms_eps"));
  bad = c;
  bad.eos_id = 100;
  CHECK(test::contains(message(bad), "eos_id"));
  bad = c;
  bad.num_q_heads = 1 << 22;
  bad.num_kv_heads = 1 << 22;
  CHECK(test::contains(message(bad), "q_dim"));
}

TEST_CASE("model_loader randomly corrupted GGUF metadata loads or throws LoadError, never crashes") {
  test::TempDir dir("loader-fuzz");
  const engine::ModelShape shape{"fuzz", 64, 2, 4, 2, 96, 300, 256};
  const auto good = engine::random_model_gguf(shape, DType::F16, 5);
  const size_t header = test::find_bytes(good, "output.weight") + 64;  // past the last tensor info
  const std::string path = dir / "fuzz.gguf";
  std::mt19937_64 rng(99);
  int num_loaded = 0;
  for (int iter = 0; iter < 300; ++iter) {
    auto b = good;
    for (int k = 0, n = 1 + int(rng() % 3); k < n; ++k) {
      const size_t at = size_t(rng() % header);
      b[at] = rng() % 2 ? uint8_t(rng()) : uint8_t(b[at] ^ (1u << (rng() % 8)));
    }
    test::write_bytes(path, b);
    CAPTURE(iter);
    try {
      engine::load_model(path);
      ++num_loaded;
    } catch (const engine::LoadError& e) {
      CHECK_MESSAGE(test::contains(e.what(), path), e.what());
    }
  }
  CHECK(num_loaded > 0);
}

}  // TEST_SUITE

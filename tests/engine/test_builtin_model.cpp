// Random-weight models: presets, determinism, the synthetic vocabulary, every weight dtype, Q8_0's
// interleaved layout; and the built-in default model (stories260K, embedded) loaded from the executable's data.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>

#include "cache/kv_cache.h"
#include "engine/builtin_model.h"
#include "engine/default_model.h"
#include "engine/generator.h"
#include "engine/model.h"
#include "engine/model_loader.h"
#include "kernels/cpu/isa.h"
#include "kernels/matmul.h"
#include "loader_test_support.h"

using namespace inflight;
using engine::GgufFile;
using engine::ModelShape;
using kernels::DType;
using kernels::WeightMatrix;

namespace {

GgufFile parse(std::vector<uint8_t> bytes) {
  return GgufFile::from_memory(std::make_shared<const std::vector<uint8_t>>(std::move(bytes)), "random.gguf");
}

std::vector<float> dequantize(const WeightMatrix& w) {
  std::vector<float> out(size_t(w.rows * w.cols));
  for (int64_t r = 0; r < w.rows; ++r) kernels::matrix_row(w, r, out.data() + r * w.cols);  // plain or interleaved
  return out;
}

double rms(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  return std::sqrt(s / double(v.size()));
}

// A small shape with the vocabulary of `vocab_size`.
ModelShape small_shape(int vocab_size) { return {"small", 64, 1, 4, 2, 96, vocab_size, 256}; }

}  // namespace

TEST_SUITE("builtin_model") {

TEST_CASE("builtin_model presets") {
  const ModelShape* tiny = engine::find_preset("tiny");
  REQUIRE(tiny != nullptr);
  CHECK(tiny->dim == 128);
  CHECK(tiny->num_layers == 4);
  CHECK(tiny->num_q_heads == 8);
  CHECK(tiny->num_kv_heads == 2);
  CHECK(tiny->ffn_dim == 384);
  CHECK(tiny->vocab_size == 512);
  CHECK(tiny->max_seq_len == 2048);
  const ModelShape* smol = engine::find_preset("smollm-135m");
  REQUIRE(smol != nullptr);
  CHECK((smol->dim == 576 && smol->num_layers == 30 && smol->num_q_heads == 9 && smol->num_kv_heads == 3 &&
         smol->ffn_dim == 1536 && smol->vocab_size == 49152 && smol->max_seq_len == 2048));
  const ModelShape* tl = engine::find_preset("tinyllama-1.1b");
  REQUIRE(tl != nullptr);
  CHECK((tl->dim == 2048 && tl->num_layers == 22 && tl->num_q_heads == 32 && tl->num_kv_heads == 4 &&
         tl->ffn_dim == 5632 && tl->vocab_size == 32000 && tl->max_seq_len == 2048));
  // The real dimensions of the new families (their config.json).
  const ModelShape* q25 = engine::find_preset("qwen2.5-0.5b");
  REQUIRE(q25 != nullptr);
  CHECK((q25->architecture == "qwen2" && q25->dim == 896 && q25->num_layers == 24 && q25->num_q_heads == 14 &&
         q25->num_kv_heads == 2 && q25->ffn_dim == 4864 && q25->vocab_size == 151936 && q25->tied &&
         q25->rope_theta == 1000000.0 && q25->qkv_bias()));
  const ModelShape* q3 = engine::find_preset("qwen3-0.6b");
  REQUIRE(q3 != nullptr);
  CHECK((q3->architecture == "qwen3" && q3->dim == 1024 && q3->num_layers == 28 && q3->num_q_heads == 16 &&
         q3->num_kv_heads == 8 && q3->head_size() == 128 && q3->ffn_dim == 3072 && q3->vocab_size == 151936 &&
         q3->tied && q3->qk_norm()));
  const ModelShape* l32 = engine::find_preset("llama3.2-1b");
  REQUIRE(l32 != nullptr);
  CHECK((l32->architecture == "llama" && l32->dim == 2048 && l32->num_layers == 16 && l32->num_q_heads == 32 &&
         l32->num_kv_heads == 8 && l32->ffn_dim == 8192 && l32->vocab_size == 128256 && l32->tied &&
         l32->rope_scaling == "llama3" && l32->rope_factor == 32.0f && l32->rope_original_context == 8192 &&
         l32->rope_theta == 500000.0));
  for (const char* small : {"llama3-small", "qwen2-small", "qwen3-small", "mistral-small"}) {
    const ModelShape* s = engine::find_preset(small);
    REQUIRE(s != nullptr);
    CHECK((s->dim % 256 == 0 && s->ffn_dim % 256 == 0 && s->num_q_heads * s->head_size() % 256 == 0));
  }
  CHECK(engine::model_presets().size() == 10);
  CHECK(engine::find_preset("gpt-5") == nullptr);
}

TEST_CASE("builtin_model random_model_gguf is deterministic in the seed") {
  const ModelShape s = small_shape(300);
  const auto a = engine::random_model_gguf(s, DType::F32, 7);
  CHECK(a == engine::random_model_gguf(s, DType::F32, 7));
  CHECK(a != engine::random_model_gguf(s, DType::F32, 8));
  CHECK_THROWS_AS(engine::random_model_gguf({"bad", 64, 1, 3, 1, 96, 300, 256}, DType::F32, 1), std::invalid_argument);
  CHECK_THROWS_AS(engine::random_model_gguf({"bad", 64, 1, 4, 3, 96, 300, 256}, DType::F32, 1), std::invalid_argument);
  CHECK_THROWS_AS(engine::random_model_gguf({"bad", 64, 1, 4, 2, 96, 100, 256}, DType::F32, 1), std::invalid_argument);
  CHECK_THROWS_AS(engine::random_model_gguf({"bad", 64, 1, 4, 2, 80, 300, 256}, DType::Q8_0, 1), std::invalid_argument);
}

TEST_CASE("builtin_model metadata and the synthetic sentencepiece vocabulary") {
  for (int vocab : {300, 512, 49152}) {
    CAPTURE(vocab);
    const GgufFile g = parse(engine::random_model_gguf(small_shape(vocab), DType::F32, 1));
    CHECK(g.get_string("general.architecture") == "llama");
    CHECK(g.get_string("general.name") == "small");
    CHECK(g.get_int("general.file_type") == 0);
    CHECK(g.get_int("llama.attention.head_count_kv") == 2);
    CHECK(g.get_int("llama.rope.dimension_count") == 16);
    CHECK(g.get_string("tokenizer.ggml.model") == "llama");
    CHECK(g.get_bool("tokenizer.ggml.add_bos_token") == true);
    const auto tokens = g.get_string_array("tokenizer.ggml.tokens");
    const auto types = g.get_int_array("tokenizer.ggml.token_type");
    const auto scores = g.get_float_array("tokenizer.ggml.scores");
    REQUIRE(tokens.size() == size_t(vocab));
    REQUIRE(types.size() == size_t(vocab));
    REQUIRE(scores.size() == size_t(vocab));
    CHECK(tokens[0] == "<unk>");
    CHECK(types[0] == 2);
    CHECK((tokens[1] == "<s>" && tokens[2] == "</s>" && types[1] == 3 && types[2] == 3));
    CHECK(tokens[3] == "<0x00>");
    CHECK(tokens[3 + 0x0A] == "<0x0A>");
    CHECK(tokens[258] == "<0xFF>");
    for (int i = 3; i < 259; ++i) CHECK(types[size_t(i)] == 6);
    CHECK(tokens[259] == "\xE2\x96\x81");
    CHECK(tokens[260] == "!");
    CHECK(std::set<std::string>(tokens.begin(), tokens.end()).size() == tokens.size());
    for (size_t i = 260; i < tokens.size(); ++i) {
      CHECK(types[i] == 1);
      CHECK(scores[i] < scores[i - 1]);
    }
    if (vocab == 512) CHECK(tokens[354 + 26] == "\xE2\x96\x81" "aa");
  }
  CHECK(parse(engine::random_model_gguf(small_shape(300), DType::Q8_0, 1)).get_int("general.file_type") == 7);
}

TEST_CASE("builtin_model every dtype holds the F32 values up to rounding") {
  test::TempDir dir("random");
  const ModelShape s = small_shape(320);
  engine::write_random_model(dir / "f32.gguf", s, DType::F32, 3);
  const auto ref = engine::load_model(dir / "f32.gguf");
  const auto& rw = ref.weights;
  CHECK(rw.config.dim == 64);
  CHECK(rw.config.head_dim == 16);
  CHECK_FALSE(rw.config.tied_embeddings);
  CHECK(rms(dequantize(rw.token_embd)) == doctest::Approx(1.0).epsilon(0.05));
  CHECK(rms(dequantize(rw.layers[0].wq)) == doctest::Approx(1.0 / 8.0).epsilon(0.05));
  CHECK(rms(dequantize(rw.layers[0].w_down)) == doctest::Approx(1.0 / std::sqrt(96.0)).epsilon(0.05));
  CHECK(rw.layers[0].attn_norm == std::vector<float>(64, 1.0f));
  CHECK(rw.output_norm == std::vector<float>(64, 1.0f));

  for (DType dtype : {DType::F16, DType::BF16, DType::Q8_0}) {
    CAPTURE(kernels::dtype_name(dtype));
    const std::string path = dir / (std::string(kernels::dtype_name(dtype)) + ".gguf");
    engine::write_random_model(path, s, dtype, 3);
    const auto m = engine::load_model(path);
    const auto& w = m.weights;
    CHECK(w.layers[0].wk.dtype == dtype);
    CHECK(w.output.dtype == dtype);
    CHECK(w.layers[0].ffn_norm == std::vector<float>(64, 1.0f));
    // Bound of one element's rounding error, relative to the row's scale.
    const double tol = dtype == DType::F16 ? 1e-3 : dtype == DType::BF16 ? 8e-3 : 1.0 / 127.0;
    for (const auto& [a, b] : {std::pair{&w.layers[0].wq, &rw.layers[0].wq}, std::pair{&w.layers[0].w_down, &rw.layers[0].w_down},
                               std::pair{&w.token_embd, &rw.token_embd}, std::pair{&w.output, &rw.output}}) {
      const auto x = dequantize(*a), y = dequantize(*b);
      double max_abs = 0, max_err = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        max_abs = std::max(max_abs, double(std::fabs(y[i])));
        max_err = std::max(max_err, double(std::fabs(x[i] - y[i])));
      }
      CHECK(max_err <= tol * max_abs);
      CHECK(max_err > 0.0);
    }
  }
}

TEST_CASE("builtin_model Q8_0 and F16 are interleaved in place when loaded from a file, and give the tokens of Model's copy") {
  for (DType dtype : {DType::Q8_0, DType::F16}) {
    CAPTURE(kernels::dtype_name(dtype));
    test::TempDir dir("interleave");
    const std::string path = dir / "model.gguf";
    engine::write_random_model(path, small_shape(320), dtype, 5);
    const bool pays = kernels::interleaving_pays(kernels::WeightMatrix{dtype, nullptr, 64, 64});
    if (!pays) MESSAGE("this CPU lacks the ISA that interleaves " << kernels::dtype_name(dtype) << ": only the tokens are compared");
    const auto from_file = engine::load_model(path);
    std::ifstream in(path, std::ios::binary);
    auto bytes = std::make_shared<const std::vector<uint8_t>>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    const auto from_memory = engine::load_gguf_model(bytes, "model.gguf");
    // From a file: rearranged where the file's copy lies, so Model adds no buffer.
    CHECK(from_file.weights.layers[0].wq.interleaved == pays);
    CHECK(from_file.weights.output.interleaved == pays);
    CHECK_FALSE(from_memory.weights.layers[0].w_down.interleaved);  // not its own copy: left as it is
    engine::Model a(from_file.weights), b(from_memory.weights);
    CHECK(a.weights().storage.size() == from_file.weights.storage.size());
    CHECK(b.weights().storage.size() == from_memory.weights.storage.size() + (pays ? 1 : 0));
    CHECK(b.weights().layers[0].w_down.interleaved == pays);
    std::vector<float> ra(64), rb(64);
    for (int64_t r : {0, 17, 319}) {  // embedding rows read through either layout
      kernels::matrix_row(a.weights().token_embd, r, ra.data());
      kernels::matrix_row(b.weights().token_embd, r, rb.data());
      CHECK(ra == rb);
    }
    auto run = [&](engine::Model& m) {
      cache::KvCache kv({m.config().num_layers, m.config().num_kv_heads, m.config().head_dim, 16, 8, kernels::KvDType::F32, 0});
      engine::GenerateOptions o;
      o.max_tokens = 24;
      o.sampling.temperature = 0.0f;
      o.stop_at_eos = false;
      o.keep_logits = 24;
      return engine::generate(m, kv, from_file.tokenizer, {1, 7, 42, 99}, o);
    };
    const engine::GenerateResult ga = run(a), gb = run(b);
    CHECK(ga.generated_ids == gb.generated_ids);
    CHECK(ga.logits == gb.logits);
  }
}

TEST_CASE("builtin_model load_builtin_model: the embedded stories260K, byte for byte the shared file") {
  const auto m = engine::load_builtin_model();
  const auto& c = m.weights.config;
  CHECK(c.name == "stories260K");
  CHECK(c.dim == 64);
  CHECK(c.num_layers == 5);
  CHECK(c.num_q_heads == 8);
  CHECK(c.num_kv_heads == 4);
  CHECK(c.head_dim == 8);
  CHECK(c.ffn_dim == 172);
  CHECK(c.vocab_size == 512);
  CHECK(c.max_seq_len == 512);
  CHECK(c.rope_style == kernels::RopeStyle::GptJ);
  CHECK(m.tokenizer.vocab_size() == 512);
  CHECK(m.tokenizer.bos_id() == 1);
  CHECK(m.tokenizer.eos_id() == 2);
  const std::span<const uint8_t> image = engine::default_model_gguf();
  const std::vector<uint8_t> shared = test::read_bytes(test::stories_gguf());
  REQUIRE(image.size() == shared.size());
  CHECK(std::memcmp(image.data(), shared.data(), shared.size()) == 0);
  CHECK(reinterpret_cast<uintptr_t>(image.data()) % 64 == 0);
  const auto ids = m.tokenizer.encode("Once upon a time", true);
  CHECK(ids == std::vector<int32_t>{1, 403, 407, 261, 378});
  CHECK(m.tokenizer.decode(ids) == "Once upon a time");
}

}  // TEST_SUITE

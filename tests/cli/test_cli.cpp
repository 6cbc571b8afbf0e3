// The `inflight` executable as a user runs it: generate with no arguments, make-model, bad flags.
#include <doctest/doctest.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <string>
#include <sys/wait.h>

#include "engine/model.h"
#include "engine/model_loader.h"
#include "test_support.h"

namespace {
using inflight::test::CommandResult;
CommandResult run(const std::string& args, bool stdout_only = false) {
  return inflight::test::run_inflight(args, stdout_only);
}
}  // namespace

TEST_SUITE("cli") {
  TEST_CASE("generate with no arguments runs the built-in stories260K model and writes English") {
    const CommandResult r = run("generate -n 16");
    CHECK(r.status == 0);
    CHECK(r.output.find("stories260K") != std::string::npos);
    CHECK(r.output.find("--model") != std::string::npos);
    CHECK(r.output.find("tok/s") != std::string::npos);
    // Greedy, the built-in model continues the prompt as run.c does with stories260K.
    const CommandResult g = run("generate -n 20 --temperature 0", true);
    CHECK(g.status == 0);
    CHECK(g.output.find("Once upon a time, there was a little girl named Lily.") != std::string::npos);
  }

  TEST_CASE("generate on stories260K greedy prints the golden continuation") {
    const CommandResult r = run("generate -m " + inflight::test::stories_gguf() +
                         " -p 'Once upon a time' -n 20 --temperature 0 --kv-block-size 4");
    CHECK(r.status == 0);
    CHECK(r.output.find("Once upon a time, there was a little girl named Lily.") != std::string::npos);
  }

  TEST_CASE("make-model writes a loadable GGUF for every weight dtype and shape override") {
    inflight::test::TempDir dir("cli");
    // tiny's hidden size 128 takes the 32-block types; the K-quants get a 256-wide shape (q4_k_m also runs
    // on 128, all fallbacks).
    for (const char* dtype : {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k_m", "q4_k", "q5_k",
                              "q6_k", "q5_k_m"}) {
      const std::string dtype_name = dtype;
      CAPTURE(dtype_name);
      const bool wide = dtype_name == "q4_k" || dtype_name == "q5_k" || dtype_name == "q6_k" || dtype_name == "q5_k_m";
      const std::string path = dir / (std::string("m-") + dtype + ".gguf");
      const CommandResult r = run(std::string("make-model --preset tiny --layers 2 --vocab 300 --dtype ") + dtype +
                                  (wide ? " --dim 256 --ffn 512" : "") + " -o " + path);
      REQUIRE(r.status == 0);
      const inflight::engine::LoadedModel m = inflight::engine::load_model(path);
      CHECK(m.weights.config.num_layers == 2);
      CHECK(m.weights.config.vocab_size == 300);
      CHECK(m.tokenizer.vocab_size() == 300);
      const CommandResult g = run("generate -m " + path + " -n 8 --seed 3", true);
      CHECK(g.status == 0);
      CHECK(g.output.size() > std::string("Once upon a time").size());
      CHECK(run("generate -m " + path + " -n 8 --seed 3", true).output == g.output);  // same seed, same text
    }
  }

  TEST_CASE("make-model writes each architecture's small preset, and generate runs it") {
    inflight::test::TempDir dir("cli");
    for (const std::string preset : {"llama3-small", "qwen2-small", "qwen3-small", "mistral-small"}) {
      CAPTURE(preset);
      const std::string path = dir / (preset + ".gguf");
      const CommandResult r = run("make-model --preset " + preset + " --dtype q8_0 -o " + path);
      REQUIRE(r.status == 0);
      const std::string arch = preset.substr(0, preset.find('-'));
      CHECK(r.output.find("(" + (arch == "llama3" ? std::string("llama") : arch) + ")") != std::string::npos);
      CHECK(inflight::engine::load_model(path).weights.config.architecture == (arch == "llama3" ? "llama" : arch));
      const CommandResult g = run("generate -m " + path + " -n 24 --temperature 0", true);
      CHECK(g.status == 0);
    }
  }

  TEST_CASE("tokenize (the test command) answers each JSON line, a bad line with an error") {
    inflight::test::TempDir dir("cli");
    std::ofstream(dir / "in.jsonl") << "{\"text\": \"Once upon a time\", \"add_special_tokens\": true}\n"
                                    << "not json\n"
                                    << "{\"ids\": [1, 403, 407, 261, 378]}\n"
                                    << "{\"ids\": [9999]}\n";
    const CommandResult r = run("tokenize --tokenizer " + inflight::test::stories_gguf() + " < " + (dir / "in.jsonl"), true);
    CHECK(r.status == 0);
    CHECK(r.output == "{\"ids\":[1,403,407,261,378],\"text\":\"Once upon a time\"}\n"
                      "{\"error\":\"each line must be a JSON object\"}\n"
                      "{\"text\":\"Once upon a time\"}\n"
                      "{\"error\":\"token id 9999 is outside the vocabulary [0, 512)\"}\n");
    CHECK(run("tokenize --tokenizer /nonexistent.gguf < /dev/null").status == 1);
  }

  TEST_CASE("bad flags and bad files are clear errors, not crashes") {
    CommandResult r = run("generate --kv-block-size 3");
    CHECK(r.status == 1);
    CHECK(r.output.find("power of two") != std::string::npos);
    r = run("generate --kv-cache-dtype f7");
    CHECK(r.status == 1);
    CHECK(r.output.find("f7") != std::string::npos);
    r = run("generate -m /nonexistent/model.gguf");
    CHECK(r.status == 1);
    CHECK(r.output.find("/nonexistent/model.gguf") != std::string::npos);
    r = run("make-model --preset nope");
    CHECK(r.status == 1);
    CHECK(r.output.find("nope") != std::string::npos);
    r = run("make-model --format hf");
    CHECK(r.status == 1);
    CHECK(r.output.find("--tokenizer") != std::string::npos);
    r = run("make-model --tokenizer /nonexistent/tok");
    CHECK(r.status == 1);
    CHECK(r.output.find("/nonexistent/tok") != std::string::npos);
    r = run("make-model --dtype q4_k");  // tiny: hidden size 128
    CHECK(r.status == 1);
    CHECK(r.output.find("token_embd.weight has 128 columns, not a multiple of the q4_k block size 256") != std::string::npos);
    r = run("make-model --dtype q3_k");
    CHECK(r.status == 1);
    CHECK(r.output.find("q3_k") != std::string::npos);
    r = run("make-model --format onnx");
    CHECK(r.status == 1);
    CHECK(r.output.find("onnx") != std::string::npos);
    r = run("generate --top-p 0");
    CHECK(r.status == 1);
    CHECK(r.output.find("top_p") != std::string::npos);
    r = run("generate --device gpu");
    CHECK(r.status == 1);
    CHECK(r.output.find("unknown device 'gpu' (auto, cpu, cuda)") != std::string::npos);
  }

  TEST_CASE("--device: cpu runs on the CPU, auto says what it chose, cuda without a GPU is a clear error") {
    CommandResult r = run("generate -n 4 --temperature 0 --device cpu");
    CHECK(r.status == 0);
    CHECK(r.output.find("device: cpu (asked for)") != std::string::npos);
    if (inflight::engine::gpu_memory().total > 0) return;  // a GPU machine: the cuda tests cover the rest
    r = run("generate -n 4 --temperature 0 --device auto");
    CHECK(r.status == 0);
    CHECK(r.output.find("device: cpu (auto: ") != std::string::npos);
    for (const char* cmd : {"generate -n 4 --device cuda", "serve --port 0 --device cuda"}) {
      CAPTURE(cmd);
      r = run(cmd);
      CHECK(r.status == 1);
      CHECK(r.output.find("--device cuda: ") != std::string::npos);
    }
  }
}

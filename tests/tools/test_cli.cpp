// The `inflight` executable as a user runs it: generate with no arguments, make-model, bad flags.
#include <doctest/doctest.h>

#include <array>
#include <cstdio>
#include <string>
#include <sys/wait.h>

#include "engine/model_loader.h"
#include "test_support.h"

namespace {

struct Result {
  int status = -1;
  std::string output;  // stdout and stderr
};

// Runs `inflight args`; output is stdout, with stderr too unless stdout_only.
Result run(const std::string& args, bool stdout_only = false) {
  const std::string cmd = std::string(INFLIGHT_BINARY) + " " + args + (stdout_only ? " 2>/dev/null" : " 2>&1");
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p);
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

}  // namespace

TEST_SUITE("cli") {
  TEST_CASE("generate with no arguments runs the built-in model and says its weights are random") {
    const Result r = run("generate -n 16");
    CHECK(r.status == 0);
    CHECK(r.output.find("RANDOM weights") != std::string::npos);
    CHECK(r.output.find("--model") != std::string::npos);
    CHECK(r.output.find("tok/s") != std::string::npos);
  }

  TEST_CASE("generate on stories260K greedy prints the golden continuation") {
    const Result r = run("generate -m " + inflight::test::stories_gguf() +
                         " -p 'Once upon a time' -n 20 --temperature 0 --kv-block-size 4");
    CHECK(r.status == 0);
    CHECK(r.output.find("Once upon a time, there was a little girl named Lily.") != std::string::npos);
  }

  TEST_CASE("make-model writes a loadable GGUF for every weight dtype and shape override") {
    inflight::test::TempDir dir("cli");
    for (const char* dtype : {"f32", "f16", "bf16", "q8_0"}) {
      const std::string dtype_name = dtype;
      CAPTURE(dtype_name);
      const std::string path = dir / (std::string("m-") + dtype + ".gguf");
      const Result r = run(std::string("make-model --preset tiny --layers 2 --vocab 300 --dtype ") + dtype + " -o " + path);
      REQUIRE(r.status == 0);
      const inflight::engine::LoadedModel m = inflight::engine::load_model(path);
      CHECK(m.weights.config.num_layers == 2);
      CHECK(m.weights.config.vocab_size == 300);
      CHECK(m.tokenizer.vocab_size() == 300);
      const Result g = run("generate -m " + path + " -n 8 --seed 3", true);
      CHECK(g.status == 0);
      CHECK(g.output.size() > std::string("Once upon a time").size());
      CHECK(run("generate -m " + path + " -n 8 --seed 3", true).output == g.output);  // same seed, same text
    }
  }

  TEST_CASE("bad flags and bad files are clear errors, not crashes") {
    Result r = run("generate --kv-block-size 3");
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
    r = run("generate --top-p 0");
    CHECK(r.status == 1);
    CHECK(r.output.find("top_p") != std::string::npos);
  }
}

// `inflight render-template`: a built-in or a file rendered over JSON contexts (one, or a list with a
// result per context), and its errors.
#include <doctest/doctest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "server/chat_template_support.h"
#include "test_support.h"

namespace {
using inflight::test::CommandResult;
CommandResult run(const std::string& args, bool stdout_only = false) {
  return inflight::test::run_inflight(args, stdout_only);
}
}  // namespace

TEST_SUITE("cli render-template") {
  TEST_CASE("one context prints the text; a list prints a result per context") {
    inflight::test::TempDir dir("render-template");
    std::ofstream(dir / "one.json") << R"({"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": true})";
    CommandResult r = run("render-template --template chatml --contexts " + dir / "one.json", true);
    CHECK(r.status == 0);
    CHECK(r.output == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    // The same from standard input.
    r = run("render-template --template chatml < " + dir / "one.json", true);
    CHECK(r.output == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");

    std::ofstream(dir / "t.jinja") << "{% if x == 'boom' %}{{ raise_exception('no boom') }}{% endif %}{{ x | upper }}{{ y.z() }}";
    std::ofstream(dir / "many.json") << R"([{"x": "a", "y": {}}, {"x": "boom"}, {"x": "b"}])";
    r = run("render-template --template " + dir / "t.jinja" + " --contexts " + dir / "many.json", true);
    REQUIRE(r.status == 0);
    const nlohmann::json results = nlohmann::json::parse(r.output);
    REQUIRE(results.size() == 3);
    CHECK(results[0] == nlohmann::json{{"error", "template error, line 1: 'z' is undefined and cannot be called"}});
    CHECK(results[1] == nlohmann::json{{"raised", "no boom"}});
    CHECK(results[2]["error"].get<std::string>().find("'z' is undefined") != std::string::npos);

    r = run("render-template --template llama3 --print-source", true);
    CHECK(r.output.find("<|start_header_id|>") != std::string::npos);
  }

  TEST_CASE("--model: the model's own template (else llama2) with its tokenizer's bos_token / eos_token") {
    inflight::test::TempDir dir("render-template-model");
    std::ofstream(dir / "ctx.json") << R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]})";
    CommandResult r = run("render-template --model " + inflight::test::stories_gguf() + " --contexts " + dir / "ctx.json", true);
    CHECK(r.status == 0);
    CHECK(r.output == "[INST] Hi [/INST] Yo </s>");  // stories260K has no template: llama2, eos </s>
    inflight::test::write_stories_with_chat_template(dir / "own.gguf", "{{ bos_token }}{{ messages | length }}{{ eos_token }}");
    r = run("render-template -m " + dir / "own.gguf" + " --contexts " + dir / "ctx.json", true);
    CHECK(r.output == "<s>2</s>");
    // --template wins over the model's; a context's own bos_token wins over the tokenizer's.
    std::ofstream(dir / "ctx2.json") << R"({"messages": [], "bos_token": "[B]", "add_generation_prompt": true})";
    r = run("render-template -m " + dir / "own.gguf" + " --template chatml --contexts " + dir / "ctx2.json", true);
    CHECK(r.output == "<|im_start|>assistant\n");
    r = run("render-template -m " + dir / "own.gguf" + " --contexts " + dir / "ctx2.json", true);
    CHECK(r.output == "[B]0</s>");
  }

  TEST_CASE("errors: unknown template, bad JSON, a syntax error, a raise on a single context") {
    inflight::test::TempDir dir("render-template-errors");
    CommandResult r = run("render-template --contexts /dev/null");
    CHECK(r.status == 1);
    CHECK(r.output.find("--template or --model") != std::string::npos);
    r = run("render-template --template nosuch --contexts /dev/null");
    CHECK(r.status == 1);
    CHECK(r.output.find("neither a built-in") != std::string::npos);
    std::ofstream(dir / "bad.json") << "{not json";
    r = run("render-template --template chatml --contexts " + dir / "bad.json");
    CHECK(r.status == 1);
    CHECK(r.output.find("not valid JSON") != std::string::npos);
    std::ofstream(dir / "syntax.jinja") << "{% if x %}";
    r = run("render-template --template " + dir / "syntax.jinja" + " --contexts " + dir / "bad.json");
    CHECK(r.status == 1);
    CHECK(r.output.find("template syntax error, line 1") != std::string::npos);
    std::ofstream(dir / "raise.jinja") << "{{ raise_exception('refused') }}";
    std::ofstream(dir / "ctx.json") << "{}";
    r = run("render-template --template " + dir / "raise.jinja" + " --contexts " + dir / "ctx.json");
    CHECK(r.status == 1);
    CHECK(r.output.find("refused") != std::string::npos);
  }
}

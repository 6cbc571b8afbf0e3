// Chat templates: the built-ins, choosing one, what the template sees, encoding control pieces as their
// token ids, and the model's own template reaching LoadedModel.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/model_loader.h"
#include "chat_template_support.h"
#include "server/chat_template.h"
#include "test_support.h"

using namespace inflight;

namespace {

nlohmann::ordered_json msg(const char* role, const char* content) { return {{"role", role}, {"content", content}}; }

server::ChatInput conversation(std::initializer_list<nlohmann::ordered_json> messages, bool add_generation_prompt = true) {
  server::ChatInput in;
  for (const auto& m : messages) in.messages.push_back(m);
  in.add_generation_prompt = add_generation_prompt;
  return in;
}

}  // namespace

TEST_SUITE("chat template") {
  TEST_CASE("built-in templates: system prompts, multi-turn, and the opened assistant turn") {
    const engine::LoadedModel m = engine::load_model(test::stories_gguf());  // bos <s>, eos </s>
    auto render = [&](const char* name, const server::ChatInput& in) {
      return server::ChatTemplate(server::choose_chat_template(name, {}), m.tokenizer).render(in);
    };
    const server::ChatInput chat =
        conversation({msg("system", "Be brief."), msg("user", "Hi"), msg("assistant", "Hello."), msg("user", "Bye")});
    CHECK(render("llama2", chat) == "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello. </s><s>[INST] Bye [/INST]");
    CHECK(render("mistral", chat) == "[INST] Be brief.\n\nHi [/INST] Hello.</s>[INST] Bye [/INST]");
    CHECK(render("chatml", chat) ==
          "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n"
          "<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n");
    CHECK(render("zephyr", chat) ==
          "<|system|>\nBe brief.</s>\n<|user|>\nHi</s>\n<|assistant|>\nHello.</s>\n<|user|>\nBye</s>\n<|assistant|>\n");
    CHECK(render("llama3", conversation({msg("user", "Hi")})) ==
          "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
    CHECK(render("phi3", conversation({msg("user", "Hi")})) == "<|user|>\nHi<|end|>\n<|assistant|>\n");
    CHECK(render("gemma", conversation({msg("system", "Be brief."), msg("user", "Hi")})) ==
          "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n");
    // add_generation_prompt off: no opened assistant turn.
    CHECK(render("chatml", conversation({msg("user", "Hi")}, false)) == "<|im_start|>user\nHi<|im_end|>\n");
    // The [INST] templates know three roles; anything else is refused with the template's message.
    CHECK_THROWS_WITH_AS(render("llama2", conversation({msg("tool", "22")})), doctest::Contains("not tool"),
                         server::jinja::Error);
    CHECK(server::chat_template_names() == "llama2, mistral, chatml, zephyr, llama3, phi3, gemma");
    CHECK(server::builtin_chat_template("chatml") != nullptr);
    CHECK(server::builtin_chat_template("jinja") == nullptr);
  }

  TEST_CASE("the template sees tools, chat_template_kwargs and the tokenizer's bos/eos") {
    const engine::LoadedModel m = engine::load_model(test::stories_gguf());
    server::ChatInput in = conversation({msg("user", "Hi")});
    in.tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "f", "b": 1, "a": 2}}])");
    in.kwargs = {{"enable_thinking", false}, {"messages", "ignored: the conversation wins"}};
    const server::ChatTemplate t({"{{ bos_token }}|{{ eos_token }}|{{ tools | tojson }}|{{ enable_thinking }}|"
                                  "{{ messages | length }}|{{ add_generation_prompt }}",
                                  "test"},
                                 m.tokenizer);
    CHECK(t.render(in) == R"(<s>|</s>|[{"type": "function", "function": {"name": "f", "b": 1, "a": 2}}]|False|1|True)");
    in.tools = nullptr;
    CHECK(server::ChatTemplate({"{{ tools is none }}", "test"}, m.tokenizer).render(in) == "True");
  }

  TEST_CASE("choosing: auto takes the model's own, else llama2; names; files; errors") {
    CHECK(server::choose_chat_template("auto", "{{ x }}").source == "{{ x }}");
    CHECK(server::choose_chat_template("auto", "").source == *server::builtin_chat_template("llama2"));
    CHECK(server::choose_chat_template("gemma", "{{ x }}").source == *server::builtin_chat_template("gemma"));
    test::TempDir dir("chat-template-file");
    const std::string file = dir / "t.jinja";
    std::ofstream(file) << "{{ messages[0].content }}!";
    CHECK(server::choose_chat_template(file, "").source == "{{ messages[0].content }}!");
    CHECK_THROWS_WITH_AS(server::choose_chat_template(dir / "missing.jinja", ""),
                         doctest::Contains("neither a built-in"), std::invalid_argument);
    const engine::LoadedModel m = engine::load_model(test::stories_gguf());
    CHECK_THROWS_WITH_AS(server::ChatTemplate({"{% for %}", "test"}, m.tokenizer), doctest::Contains("line 1"),
                         server::jinja::Error);
  }

  TEST_CASE("encoding turns control pieces into their ids; unknown markers become stop strings") {
    const engine::LoadedModel m = engine::load_model(test::stories_gguf());
    const server::ChatTemplate llama2(server::choose_chat_template("llama2", {}), m.tokenizer);
    const std::vector<int32_t> ids =
        llama2.encode(llama2.render(conversation({msg("user", "Hi"), msg("assistant", "Hello."), msg("user", "Bye")})));
    REQUIRE(!ids.empty());
    CHECK(ids.front() == m.tokenizer.bos_id());
    CHECK(std::count(ids.begin(), ids.end(), m.tokenizer.bos_id()) == 2);  // the second turn opens with BOS
    CHECK(std::count(ids.begin(), ids.end(), m.tokenizer.eos_id()) == 1);
    // Control tokens never come out of plain text.
    CHECK(m.tokenizer.decode(ids).find("</s>") == std::string::npos);
    // A BOS the template renders first is the tokenizer's own, not a second one.
    CHECK(llama2.encode("<s>Hi") == llama2.encode("Hi"));

    const server::ChatTemplate chatml(server::choose_chat_template("chatml", {}), m.tokenizer);
    CHECK(chatml.stop_token_ids().empty());
    CHECK(chatml.stop_strings() == std::vector<std::string>{"<|im_end|>"});
    CHECK(llama2.stop_strings().empty());
  }

  TEST_CASE("the model's own template reaches LoadedModel: GGUF tokenizer.chat_template, HF tokenizer_config.json") {
    const std::string jinja = "{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}";
    test::TempDir dir("chat-template");

    test::write_stories_with_chat_template(dir / "with_template.gguf", jinja);
    const engine::LoadedModel gguf = engine::load_model(dir / "with_template.gguf");
    CHECK(gguf.chat_template.rfind(jinja, 0) == 0);
    CHECK(engine::load_model(test::stories_gguf()).chat_template.empty());

    // The HF folder, with a chat template added to its tokenizer_config.json.
    const std::filesystem::path hf = dir.path / "hf";
    std::filesystem::copy(test::stories_hf(), hf);
    nlohmann::json config = nlohmann::json::parse(std::ifstream(hf / "tokenizer_config.json"));
    config["chat_template"] = jinja;
    std::ofstream(hf / "tokenizer_config.json") << config.dump();
    CHECK(engine::load_model(hf.string()).chat_template == jinja);

    // The list-of-named-templates form: the "default" one.
    config["chat_template"] = {{{"name", "tool_use"}, {"template", "{{ tools }}"}}, {{"name", "default"}, {"template", jinja}}};
    std::ofstream(hf / "tokenizer_config.json") << config.dump();
    CHECK(engine::load_model(hf.string()).chat_template == jinja);

    // chat_template.jinja beside it wins, as in transformers.
    std::ofstream(hf / "chat_template.jinja") << "{{ messages }}";
    CHECK(engine::load_model(hf.string()).chat_template == "{{ messages }}");
  }
}

// Chat templates: recognising well-known Jinja sources, rendering each family, and encoding control
// pieces as their token ids.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/model_loader.h"
#include "server/chat_template.h"
#include "test_support.h"

using namespace inflight;
using server::ChatMessage;
using server::ChatTemplateKind;

TEST_SUITE("chat template") {
  TEST_CASE("well-known templates are recognised by their markers") {
    CHECK(server::detect_chat_template("{% for m in messages %}<|im_start|>{{ m.role }}") == ChatTemplateKind::ChatML);
    CHECK(server::detect_chat_template("{{ bos_token + '[INST] <<SYS>>\\n' }}") == ChatTemplateKind::Llama2);
    CHECK(server::detect_chat_template("{{ '[INST] ' + message['content'] + ' [/INST]' }}") == ChatTemplateKind::Mistral);
    CHECK(server::detect_chat_template("<|start_header_id|>{{ role }}<|end_header_id|>") == ChatTemplateKind::Llama3);
    CHECK(server::detect_chat_template("{{ '<|user|>\\n' + content + eos_token }}") == ChatTemplateKind::Zephyr);
    CHECK(server::detect_chat_template("<|user|>{{ c }}<|end|><|assistant|>") == ChatTemplateKind::Phi3);
    CHECK(server::detect_chat_template("<start_of_turn>user") == ChatTemplateKind::Gemma);
    CHECK(!server::detect_chat_template("{{ messages }}").has_value());
    CHECK(server::parse_chat_template_name("chatml") == ChatTemplateKind::ChatML);
    CHECK(!server::parse_chat_template_name("jinja").has_value());
  }

  TEST_CASE("rendering: system prompts, multi-turn, and the opened assistant turn") {
    const std::vector<ChatMessage> chat = {
        {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "Bye"}};
    const server::ChatSpecialPieces p;
    CHECK(server::render_chat(ChatTemplateKind::Llama2, chat, p) ==
          "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello. </s><s>[INST] Bye [/INST]");
    CHECK(server::render_chat(ChatTemplateKind::Mistral, chat, p) ==
          "[INST] Be brief.\n\nHi [/INST] Hello.</s>[INST] Bye [/INST]");
    CHECK(server::render_chat(ChatTemplateKind::ChatML, chat, p) ==
          "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n"
          "<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n");
    CHECK(server::render_chat(ChatTemplateKind::Zephyr, chat, p) ==
          "<|system|>\nBe brief.</s>\n<|user|>\nHi</s>\n<|assistant|>\nHello.</s>\n<|user|>\nBye</s>\n<|assistant|>\n");
    CHECK(server::render_chat(ChatTemplateKind::Llama3, {chat.begin() + 1, chat.begin() + 2}, p) ==
          "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
    CHECK(server::render_chat(ChatTemplateKind::Gemma, {chat.begin(), chat.begin() + 2}, p) ==
          "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n");
    CHECK(server::chat_end_markers(ChatTemplateKind::ChatML) == std::vector<std::string>{"<|im_end|>"});
  }

  TEST_CASE("encoding turns control pieces into their ids; unknown markers become stop strings") {
    const engine::LoadedModel m = engine::load_model(test::stories_gguf());
    const server::ChatTemplate llama2(ChatTemplateKind::Llama2, m.tokenizer);
    const std::vector<ChatMessage> chat = {{"user", "Hi"}, {"assistant", "Hello."}, {"user", "Bye"}};
    const std::vector<int32_t> ids = llama2.encode(chat);
    REQUIRE(!ids.empty());
    CHECK(ids.front() == m.tokenizer.bos_id());
    CHECK(std::count(ids.begin(), ids.end(), m.tokenizer.bos_id()) == 2);  // the second turn opens with BOS
    CHECK(std::count(ids.begin(), ids.end(), m.tokenizer.eos_id()) == 1);
    // Control tokens never come out of plain text.
    CHECK(m.tokenizer.decode(ids).find("</s>") == std::string::npos);

    const server::ChatTemplate chatml(ChatTemplateKind::ChatML, m.tokenizer);
    CHECK(chatml.stop_token_ids().empty());
    CHECK(chatml.stop_strings() == std::vector<std::string>{"<|im_end|>"});
  }

  TEST_CASE("the model's own template reaches LoadedModel: GGUF tokenizer.chat_template, HF tokenizer_config.json") {
    const std::string jinja = "{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}";
    test::TempDir dir("chat-template");

    // stories260K.gguf with one more key. Key/value pairs sit between the 24-byte header and the tensor
    // infos; an entry a multiple of 32 bytes long keeps the (32-aligned) tensor data where it was.
    std::vector<uint8_t> bytes = test::read_bytes(test::stories_gguf());
    const std::string key = "tokenizer.chat_template";
    std::string value = jinja;
    while ((8 + key.size() + 4 + 8 + value.size()) % 32 != 0) value += ' ';
    std::vector<uint8_t> entry;
    auto put = [&](const void* p, size_t n) { entry.insert(entry.end(), (const uint8_t*)p, (const uint8_t*)p + n); };
    const uint64_t key_len = key.size(), value_len = value.size();
    const uint32_t string_type = 8;
    put(&key_len, 8), put(key.data(), key.size()), put(&string_type, 4), put(&value_len, 8), put(value.data(), value.size());
    uint64_t kv_count;
    std::memcpy(&kv_count, bytes.data() + 16, 8);
    ++kv_count;
    std::memcpy(bytes.data() + 16, &kv_count, 8);
    bytes.insert(bytes.begin() + 24, entry.begin(), entry.end());
    test::write_bytes(dir / "with_template.gguf", bytes);
    const engine::LoadedModel gguf = engine::load_model(dir / "with_template.gguf");
    CHECK(gguf.chat_template.rfind(jinja, 0) == 0);
    CHECK(server::detect_chat_template(gguf.chat_template) == ChatTemplateKind::ChatML);
    CHECK(engine::load_model(test::stories_gguf()).chat_template.empty());

    // The HF folder, with a chat template added to its tokenizer_config.json.
    const std::filesystem::path hf = dir.path / "hf";
    std::filesystem::copy(test::stories_hf(), hf);
    nlohmann::json config = nlohmann::json::parse(std::ifstream(hf / "tokenizer_config.json"));
    config["chat_template"] = jinja;
    std::ofstream(hf / "tokenizer_config.json") << config.dump();
    CHECK(engine::load_model(hf.string()).chat_template == jinja);
  }
}

// The chat-template path: any bytes as a Jinja template (server/jinja/), bound to a ChatML-style tokenizer
// (tests/tiny_tokenizer.h's byte-level vocabulary, whose control pieces the encoder must find), rendered
// with one of a few conversations transformers would pass (the first byte chooses), then encoded.
// Besides the sanitizers: only jinja::Error may escape parsing or rendering (the server turns it into a
// 400; anything else would be a 500), rendering is deterministic (unless the template reads the clock),
// and the encoded ids lie in the vocabulary (renders up to 256 KiB).
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "engine/tokenizer.h"
#include "server/chat_template.h"
#include "tiny_tokenizer.h"

using inflight::engine::Tokenizer;
using inflight::server::ChatInput;
using inflight::server::ChatTemplate;
using nlohmann::ordered_json;
namespace jinja = inflight::server::jinja;

namespace {

// The conversations: plain chat; system + tools + an assistant tool call and its result; a continued
// assistant turn without a generation prompt and with template kwargs; no messages at all.
std::vector<ChatInput> make_inputs() {
  std::vector<ChatInput> inputs(4);
  inputs[0].messages = ordered_json::parse(R"([{"role":"user","content":"Hello!"},
    {"role":"assistant","content":"Hi, how can I help?"},{"role":"user","content":"Tell me a story."}])");
  inputs[1].messages = ordered_json::parse(R"([{"role":"system","content":"You are terse."},
    {"role":"user","content":"Weather in Paris?"},
    {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function",
      "function":{"name":"get_weather","arguments":{"city":"Paris"}}}]},
    {"role":"tool","tool_call_id":"c1","content":"{\"temp\": 21}"}])");
  inputs[1].tools = ordered_json::parse(R"([{"type":"function","function":{"name":"get_weather",
    "description":"Current weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},
    "required":["city"]}}}])");
  inputs[2].messages = ordered_json::parse(R"([{"role":"user","content":[{"type":"text","text":"Part one."},
    {"type":"text","text":"Part two."}]},{"role":"assistant","content":"<think>hm</think>Partial"}])");
  inputs[2].add_generation_prompt = false;
  inputs[2].kwargs = ordered_json::parse(R"({"enable_thinking":false,"date_string":"26 Nov 2026"})");
  return inputs;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Tokenizer tok = inflight::test::load_tiny_tokenizer(inflight::test::write_tiny_byte_level_tokenizer);
  static const std::vector<ChatInput> inputs = make_inputs();
  if (size < 1) return 0;
  const ChatInput& input = inputs[data[0] % inputs.size()];
  const std::string source(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string first;
  try {
    const ChatTemplate tmpl({source, "fuzz input"}, tok);
    first = tmpl.render(input);
    if (source.find("strftime") == std::string::npos && tmpl.render(input) != first) __builtin_trap();
    // Encoding is checked on renders up to 256 KiB (far past any context served): a template may write up
    // to 64 MiB, and BPE over megabytes outlasts the 10 s per-input limit under ASan at -O1 (a 1.8 MB render
    // took over 10 s), which is a matter of speed, not of correctness.
    if (first.size() <= (size_t(256) << 10))
      for (int32_t id : tmpl.encode(first))
        if (id < 0 || id >= tok.vocab_size()) __builtin_trap();
  } catch (const jinja::Error&) {
  }
  return 0;
}

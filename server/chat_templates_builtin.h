// The built-in chat templates: server/chat_templates/NAME.jinja, compiled in by CMake (the generated
// chat_templates_builtin.cpp in the build folder), in the order `--chat-template` lists them.
#pragma once
#include <string>
#include <vector>

namespace inflight::server {

struct BuiltinChatTemplate {
  const char* name;
  std::string source;  // Jinja
};

const std::vector<BuiltinChatTemplate>& builtin_chat_templates();

}  // namespace inflight::server

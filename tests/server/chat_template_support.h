// Test models with a chat template of the test's choosing: stories260K.gguf with a
// tokenizer.chat_template key added.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "test_support.h"

namespace inflight::test {

// Writes stories260K.gguf plus tokenizer.chat_template = `jinja` (followed by a Jinja comment of padding)
// to `path`. Key/value pairs sit between the 24-byte header and the tensor infos; an entry a multiple of
// 32 bytes long keeps the (32-aligned) tensor data where it was.
inline void write_stories_with_chat_template(const std::string& path, const std::string& jinja) {
  std::vector<uint8_t> bytes = read_bytes(stories_gguf());
  const std::string key = "tokenizer.chat_template";
  std::string padding;
  while ((8 + key.size() + 4 + 8 + jinja.size() + 4 + padding.size()) % 32 != 0) padding += ' ';
  const std::string value = jinja + "{#" + padding + "#}";
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
  write_bytes(path, bytes);
}

}  // namespace inflight::test

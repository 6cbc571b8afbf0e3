// MappedFile: a whole file mapped read-only into memory, shared by the views handed out of it.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

namespace inflight::engine {

struct MappedFile {
  const uint8_t* data = nullptr;  // [size] bytes; nullptr when size == 0
  uint64_t size = 0;
  std::shared_ptr<const void> owner;  // unmaps when the last view goes
};

// Throws LoadError naming `path` when it cannot be opened, is not a regular file, or cannot be mapped.
MappedFile map_file(const std::string& path);

}  // namespace inflight::engine

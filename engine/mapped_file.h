// MappedFile: a whole file read into private memory, shared by the views handed out of it.
// NOTE: read, not mmap'ed: a file mapped from disk that is truncated or rewritten while served would
// crash the process with SIGBUS on the next touch of a vanished page; a private copy cannot change.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace inflight::engine {

struct MappedFile {
  const uint8_t* data = nullptr;  // [size] bytes; nullptr when size == 0
  uint64_t size = 0;
  std::shared_ptr<const void> owner;  // frees the memory when the last view goes
};

// Reads the whole file at `path` into anonymous memory. Throws LoadError naming `path` when it cannot be
// opened or read, is not a regular file, or changes size while it is read.
MappedFile map_file(const std::string& path);

}  // namespace inflight::engine

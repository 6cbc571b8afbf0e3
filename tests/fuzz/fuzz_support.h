// Shared by the fuzz targets: where the reference data lives, and a file holding the input's bytes for
// readers that only take a path.
#pragma once
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

namespace inflight::fuzz {

inline std::string stories_dir() { return INFLIGHT_TEST_DATA "/models/stories260K"; }

// The path of an in-memory file (memfd) now holding exactly `data`; the same file every call.
inline std::string bytes_file(const uint8_t* data, size_t size) {
  static const int fd = memfd_create("inflight-fuzz", MFD_CLOEXEC);
  if (fd < 0) std::abort();
  if (ftruncate(fd, 0) != 0) std::abort();
  size_t done = 0;
  while (done < size) {
    const ssize_t n = pwrite(fd, data + done, size - done, off_t(done));
    if (n <= 0) std::abort();
    done += size_t(n);
  }
  return "/proc/self/fd/" + std::to_string(fd);
}

}  // namespace inflight::fuzz

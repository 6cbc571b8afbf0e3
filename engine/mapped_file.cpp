#include "engine/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "engine/load_error.h"

namespace inflight::engine {

namespace {

struct Mapping {
  void* addr = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (addr != nullptr) munmap(addr, size);
  }
};

}  // namespace

MappedFile map_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_load_error(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw_load_error(path, std::string("cannot stat: ") + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw_load_error(path, "not a regular file");
  }
  MappedFile file;
  file.size = uint64_t(st.st_size);
  if (file.size == 0) {  // mmap rejects length 0; an empty file is simply no bytes
    ::close(fd);
    file.owner = std::make_shared<Mapping>();
    return file;
  }
  void* addr = mmap(nullptr, size_t(file.size), PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping stays valid without the descriptor
  if (addr == MAP_FAILED) throw_load_error(path, std::string("cannot mmap: ") + std::strerror(err));
  auto mapping = std::make_shared<Mapping>();
  mapping->addr = addr;
  mapping->size = size_t(file.size);
  file.data = static_cast<const uint8_t*>(addr);
  file.owner = std::move(mapping);
  return file;
}

}  // namespace inflight::engine

#include "engine/mapped_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "engine/load_error.h"
#include "kernels/huge_pages.h"
#include "kernels/thread_pool.h"

namespace inflight::engine {

namespace {

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

constexpr uint64_t kReadChunk = uint64_t(32) << 20;  // bytes per read(), and per task of the parallel read

}  // namespace

MappedFile map_file(const std::string& path) {
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) throw_load_error(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (fstat(f.fd, &st) != 0) throw_load_error(path, std::string("cannot stat: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw_load_error(path, "not a regular file");
  MappedFile file;
  file.size = uint64_t(st.st_size);
  if (file.size == 0) {  // an empty file is simply no bytes (and an owner, as views expect)
    file.owner = std::make_shared<char>();
    return file;
  }
  // Weights are read in full once per token, so they sit on 2 MiB pages where the kernel allows it
  // (transparent_hugepage "madvise" or "always"): one TLB entry per 2 MiB instead of 512.
  kernels::HugePageMemory memory = kernels::allocate_huge_pages(size_t(file.size));
  if (memory.data == nullptr)
    throw_load_error(path, "cannot allocate " + std::to_string(file.size) + " bytes: " + std::strerror(errno));
  uint8_t* bytes = memory.data;
  // Chunks read in parallel on the compute pool: each thread's reads also fault in (zero) its own pages,
  // which is most of the time a load takes.
  const int64_t num_chunks = int64_t((file.size + kReadChunk - 1) / kReadChunk);
  kernels::compute_pool().run(num_chunks, [&](int64_t chunk) {
    const uint64_t begin = uint64_t(chunk) * kReadChunk, end = std::min<uint64_t>(file.size, begin + kReadChunk);
    uint64_t done = begin;
    while (done < end) {
      const ssize_t n = ::pread(f.fd, bytes + done, size_t(end - done), off_t(done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw_load_error(path, "cannot read at byte " + std::to_string(done) + ": " + std::strerror(errno));
      if (n == 0)
        throw_load_error(path, "the file shrank while it was read: " + std::to_string(done) + " of " +
                                   std::to_string(file.size) + " bytes");
      done += uint64_t(n);
    }
  });
  struct stat after {};
  if (fstat(f.fd, &after) != 0 || after.st_size != st.st_size || after.st_mtim.tv_sec != st.st_mtim.tv_sec ||
      after.st_mtim.tv_nsec != st.st_mtim.tv_nsec)
    throw_load_error(path, "the file changed while it was read; load it again once it is complete");
  // The private copy is what is served; the page cache's copy may go.
  posix_fadvise(f.fd, 0, 0, POSIX_FADV_DONTNEED);
  // NOTE: the copy stays read-write (views are const). Made read-only with mprotect, it was read at about a
  // third of the bandwidth on the first pass after loading: TinyLlama f16's first 6-token prompt took 167-416
  // ms instead of 59-83, a server's first request 268-512 ms instead of 97-108 (bench/RESULTS.md).
  file.data = bytes;
  file.owner = std::move(memory.owner);
  return file;
}

}  // namespace inflight::engine

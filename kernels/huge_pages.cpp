#include "kernels/huge_pages.h"

#include <sys/mman.h>

namespace inflight::kernels {

namespace {

constexpr size_t kHugePage = size_t(2) << 20;  // x86-64 transparent huge page

// Anonymous pages, returned to the system on destruction.
struct Mapping {
  void* addr = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (addr != nullptr) munmap(addr, size);
  }
};

}  // namespace

HugePageMemory allocate_huge_pages(size_t bytes) {
  // Whole huge pages (a tail on small pages would fault 4 KiB at a time), over-allocated by one so that the
  // start can be aligned to one.
  const size_t size = (bytes + kHugePage - 1) / kHugePage * kHugePage, mapped = size + kHugePage;
  void* base = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) return {};
  auto mapping = std::make_shared<Mapping>();
  mapping->addr = base;
  mapping->size = mapped;
  void* addr = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(base) + kHugePage - 1) & ~uintptr_t(kHugePage - 1));
  madvise(addr, size, MADV_HUGEPAGE);  // advice only: no huge pages is no error
  return {static_cast<uint8_t*>(addr), std::move(mapping)};
}

}  // namespace inflight::kernels

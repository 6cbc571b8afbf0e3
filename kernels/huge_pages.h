// Memory on 2 MiB pages: the model's weights and scratch, and the matmul's packed activations.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

namespace inflight::kernels {

// `bytes` (> 0) of zeroed anonymous read-write memory, aligned to 2 MiB and advised onto 2 MiB pages
// (transparent huge pages "madvise" or "always"), freed when the last copy of `owner` goes; data is nullptr
// (errno set) when it cannot be had. Each 2 MiB page is one fault on first touch, where 4 KiB pages are
// 512 (about 10 us each on a Zen 5 VM: bench/RESULTS.md).
struct HugePageMemory {
  uint8_t* data = nullptr;
  std::shared_ptr<const void> owner;
};
HugePageMemory allocate_huge_pages(size_t bytes);

}  // namespace inflight::kernels

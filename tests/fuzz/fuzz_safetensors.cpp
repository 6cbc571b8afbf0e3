// The safetensors reader: any bytes give a file whose every tensor lies inside the bytes (read here in
// full, so AddressSanitizer sees any range past them) or a LoadError naming the file.
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/load_error.h"
#include "engine/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto bytes = std::make_shared<const std::vector<uint8_t>>(data, data + size);
  const uint8_t* begin = bytes->data();
  const uint8_t* end = begin + bytes->size();
  try {
    const auto f = inflight::engine::SafetensorsFile::from_memory(bytes, "fuzz.safetensors");
    unsigned sum = 0;
    for (const auto& t : f.tensors()) {
      if (t.nbytes < 0 || (t.nbytes > 0 && (t.data < begin || t.data + t.nbytes > end))) __builtin_trap();
      for (int64_t i = 0; i < t.nbytes; ++i) sum += t.data[i];
      if (f.find_tensor(t.name) != &t) __builtin_trap();
    }
    asm volatile("" : : "r"(sum));
  } catch (const inflight::engine::LoadError&) {
  }
  return 0;
}

#include "server/constant_time.h"

#include <cstddef>
#include <cstdint>

namespace inflight::server {

bool equal_constant_time(std::string_view given, std::string_view secret) {
  // Any length difference is a difference; the loop runs over `given` and reads `secret` cyclically, so
  // it neither stops early nor reads out of bounds.
  uint64_t diff = uint64_t(given.size()) ^ uint64_t(secret.size());
  const size_t n = secret.size();
  for (size_t i = 0; i < given.size(); ++i) {
    const unsigned char s = n == 0 ? 0 : static_cast<unsigned char>(secret[i % n]);
    diff |= static_cast<unsigned char>(given[i]) ^ s;
    // NOTE: an empty barrier: the compiler cannot see `diff` and so cannot turn the loop into one that
    // exits once `diff` is non-zero.
    asm volatile("" : "+r"(diff));
  }
  return diff == 0;
}

}  // namespace inflight::server

// The main of the CUDA tests (ctest label `cuda`): without a usable CUDA device they print why and exit 77,
// which ctest counts as skipped (SKIP_RETURN_CODE), never as passed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <string>

#include "kernels/cuda/attention.h"

int main(int argc, char** argv) {
  std::string why;
  if (!inflight::kernels::cuda::device_available(&why)) {
    std::printf("skipped: %s\n", why.c_str());
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}

// The main of the test executables. INFLIGHT_TEST_DEVICE=cuda (ctest server_cuda) asks for the model on a GPU:
// without a usable one the run prints why and exits 77, which ctest counts as skipped, never as passed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "engine/model.h"

int main(int argc, char** argv) {
  const char* device = std::getenv("INFLIGHT_TEST_DEVICE");
  if (device != nullptr && std::strcmp(device, "cuda") == 0 && inflight::engine::gpu_memory().total == 0) {
    std::printf("skipped: no CUDA device\n");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}

// The GGUF reader and model loader: any bytes load a model (weights + tokenizer) or give a LoadError
// naming the file. The bytes stay in a heap buffer, so AddressSanitizer sees any read past them.
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/load_error.h"
#include "engine/model_loader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto bytes = std::make_shared<const std::vector<uint8_t>>(data, data + size);
  try {
    inflight::engine::LoadedModel m = inflight::engine::load_gguf_model(std::move(bytes), "fuzz.gguf");
    // A loaded model's tokenizer works over its whole vocabulary.
    const int n = m.tokenizer.vocab_size();
    for (int32_t id = 0; id < n && id < 64; ++id) (void)m.tokenizer.piece(id);
    (void)m.tokenizer.encode("Once upon a time", true);
  } catch (const inflight::engine::LoadError&) {
  }
  return 0;
}

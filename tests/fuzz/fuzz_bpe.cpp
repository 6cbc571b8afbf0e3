// The tokenizer.json BPE backend under the tokenizer oracle (tokenizer_oracle.h), on the two small real
// vocabularies the tests write (tests/tiny_tokenizer.h): byte-level in Qwen 2's style (NFC, Qwen 2's split
// pattern through PCRE2, ChatML special and added tokens) and sentencepiece-style in Llama 2's (Prepend +
// Replace normalizers, byte fallback, Replace / ByteFallback / Fuse / Strip decoders). The first byte
// chooses the vocabulary (bit 0), the rest is the oracle's input.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "engine/tokenizer.h"
#include "fuzz_support.h"
#include "tiny_tokenizer.h"
#include "tokenizer_oracle.h"

using inflight::engine::Tokenizer;
namespace fs = std::filesystem;

namespace {

// Writes the vocabulary into a fresh folder, loads it, and removes the folder.
template <typename Write>
Tokenizer load(Write write) {
  char dir[] = "/tmp/inflight-fuzz-bpe-XXXXXX";
  if (!mkdtemp(dir)) std::abort();
  write(fs::path(dir));
  Tokenizer tok = Tokenizer::from_tokenizer_json(std::string(dir) + "/tokenizer.json",
                                                 std::string(dir) + "/tokenizer_config.json");
  fs::remove_all(dir);
  return tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Tokenizer byte_level = load(inflight::test::write_tiny_byte_level_tokenizer);
  static const Tokenizer metaspace = load(inflight::test::write_tiny_metaspace_tokenizer);
  if (size < 2) return 0;
  const Tokenizer& tok = (data[0] & 1) ? metaspace : byte_level;
  inflight::fuzz::check_tokenizer(tok, data[1], std::string_view(reinterpret_cast<const char*>(data) + 2, size - 2));
  return 0;
}

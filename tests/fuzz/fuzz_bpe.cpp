// The tokenizer.json BPE backend under the tokenizer oracle (tokenizer_oracle.h), on the two small real
// vocabularies the tests write (tests/tiny_tokenizer.h): byte-level in Qwen 2's style (NFC, Qwen 2's split
// pattern through PCRE2, ChatML special and added tokens) and sentencepiece-style in Llama 2's (Prepend +
// Replace normalizers, byte fallback, Replace / ByteFallback / Fuse / Strip decoders). The first byte
// chooses the vocabulary (bit 0), the rest is the oracle's input.
#include <cstdint>
#include <string_view>

#include "engine/tokenizer.h"
#include "fuzz_support.h"
#include "tiny_tokenizer.h"
#include "tokenizer_oracle.h"

using inflight::engine::Tokenizer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Tokenizer byte_level = inflight::test::load_tiny_tokenizer(inflight::test::write_tiny_byte_level_tokenizer);
  static const Tokenizer metaspace = inflight::test::load_tiny_tokenizer(inflight::test::write_tiny_metaspace_tokenizer);
  if (size < 2) return 0;
  const Tokenizer& tok = (data[0] & 1) ? metaspace : byte_level;
  inflight::fuzz::check_tokenizer(tok, data[1], std::string_view(reinterpret_cast<const char*>(data) + 2, size - 2));
  return 0;
}

// The sentencepiece tokenizer (stories260K's tok512.model) under the tokenizer oracle
// (tokenizer_oracle.h): encode any bytes, decode any ids, detokenize incrementally.
#include <cstdint>
#include <string_view>

#include "engine/tokenizer.h"
#include "fuzz_support.h"
#include "tokenizer_oracle.h"

using inflight::engine::Tokenizer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Tokenizer tok = Tokenizer::from_file(inflight::fuzz::stories_dir() + "/tok512.model");
  if (size < 1) return 0;
  inflight::fuzz::check_tokenizer(tok, data[0], std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1));
  return 0;
}

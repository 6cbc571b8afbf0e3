// The prompts a benchmark sends: lines of a JSONL file, or random prompts of exact token lengths.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace inflight::client {

struct BenchPrompt {
  std::string text;           // the completions prompt or the chat user message; unused when `ids` is set
  std::vector<int32_t> ids;   // a completions prompt given as token ids (exact length)
  int64_t prompt_len = 0;     // tokens as the client knows them: ids.size(), or 0 for text (the server counts)
  int output_len = 0;         // max_tokens
};

// One JSON object per line with a string "prompt" (or a list of token ids) and an optional positive integer
// "output_len" (default `default_output_len`); blank lines are skipped. Lines are shuffled by `seed` and
// `num_prompts` of them taken, cycling when the file has fewer. Throws std::invalid_argument naming the
// file and line of a bad entry.
std::vector<BenchPrompt> load_jsonl_prompts(const std::string& path, int num_prompts, int default_output_len,
                                            uint64_t seed);

// Completions prompts of exactly `input_len` token ids drawn uniformly from [kFirstRandomTokenId, vocab_size):
// ids below it are <unk>, <s> and </s> in Llama vocabularies.
inline constexpr int kFirstRandomTokenId = 3;
std::vector<BenchPrompt> random_token_prompts(int num_prompts, int input_len, int output_len, int vocab_size,
                                              uint64_t seed);

// A mix of random prompt shapes: `spec` is "mixed:" then comma-separated classes "INPUTxOUTPUT" with an
// optional ":WEIGHT" (default 1), e.g. "mixed:1500x32:1,64x128:3" (a quarter long prompts with short
// outputs, the rest short prompts with long outputs). Each class gets its share of `num_prompts` (largest
// remainder, so 48 prompts at 1:3 are exactly 12 and 36), in an order shuffled by `seed`; prompts are
// random token ids as random_token_prompts makes them, or for `chat` random words. Throws
// std::invalid_argument naming the bad class.
inline constexpr const char* kMixedDatasetPrefix = "mixed:";
std::vector<BenchPrompt> mixed_prompts(const std::string& spec, int num_prompts, int vocab_size, bool chat,
                                       uint64_t seed);

// Chat messages of `input_len` random common English words (the server's token count differs and is the
// one reported).
std::vector<BenchPrompt> random_word_prompts(int num_prompts, int input_len, int output_len, uint64_t seed);

}  // namespace inflight::client

#include "engine/generator.h"

#include <chrono>
#include <stdexcept>

namespace inflight::engine {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Gives the sequence's blocks back however generate() exits.
struct BlockTableGuard {
  cache::BlockTable& table;
  cache::BlockPool& pool;
  ~BlockTableGuard() { table.release(pool); }
};

}  // namespace

GenerateResult generate(Model& model, cache::KvCache& kv, const Tokenizer& tokenizer,
                        const std::vector<int32_t>& prompt_ids, const GenerateOptions& options,
                        const std::function<void(const std::string&)>& on_text) {
  const ModelConfig& c = model.config();
  if (prompt_ids.empty()) throw std::invalid_argument("the prompt has no tokens");
  for (int32_t id : prompt_ids)
    if (id < 0 || id >= c.vocab_size)
      throw std::invalid_argument("prompt token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                  std::to_string(c.vocab_size) + ")");
  const int64_t total = int64_t(prompt_ids.size()) + options.max_tokens;
  const int block_size = kv.config().block_size;
  if (total > int64_t(kv.config().num_blocks) * block_size)
    throw std::invalid_argument("prompt (" + std::to_string(prompt_ids.size()) + " tokens) + max_tokens (" +
                                std::to_string(options.max_tokens) + ") exceed the KV cache capacity of " +
                                std::to_string(int64_t(kv.config().num_blocks) * block_size) + " tokens");

  cache::BlockTable table(block_size);
  BlockTableGuard guard{table, kv.pool()};
  Sampler sampler(options.sampling);
  IncrementalDetokenizer detok(tokenizer, prompt_ids);
  std::vector<float> logits(size_t(c.vocab_size));
  GenerateResult result;

  // Runs `n` tokens starting at position `past` as one step; logits of the last one when asked.
  auto step = [&](const int32_t* tokens, int n, int past, bool want_logits) {
    if (!table.reserve(kv.pool(), int64_t(past) + n)) throw std::runtime_error("KV cache out of blocks");
    ScheduledBatch batch;
    batch.add_sequence(tokens, n, past, table.blocks().data(), table.num_blocks(), block_size, want_logits);
    batch.num_context_seqs = past == 0 || n > 1 ? 1 : 0;
    model.forward(batch, kv, logits.data());
  };

  const auto t0 = Clock::now();
  const int num_prompt = int(prompt_ids.size());
  const int chunk = options.prefill_chunk > 0 ? options.prefill_chunk : num_prompt;
  for (int done = 0; done < num_prompt; done += chunk) {
    const int n = std::min(chunk, num_prompt - done);
    step(prompt_ids.data() + done, n, done, done + n == num_prompt);
  }
  result.prefill_seconds = seconds_since(t0);

  const auto t1 = Clock::now();
  result.finish_reason = "length";
  for (int i = 0; i < options.max_tokens; ++i) {
    if (int(result.logits.size()) < options.keep_logits) result.logits.push_back(logits);
    const int32_t next = sampler.sample(logits, prompt_ids, result.generated_ids);
    result.generated_ids.push_back(next);
    if (options.stop_at_eos && next == c.eos_id) {
      result.finish_reason = "stop";
      break;
    }
    const std::string delta = detok.push(next);
    if (!delta.empty()) {
      result.text += delta;
      if (on_text) on_text(delta);
    }
    if (i + 1 == options.max_tokens) break;
    step(&next, 1, num_prompt + i, true);
  }
  const std::string tail = detok.flush();
  if (!tail.empty()) {
    result.text += tail;
    if (on_text) on_text(tail);
  }
  result.decode_seconds = seconds_since(t1);
  return result;
}

}  // namespace inflight::engine

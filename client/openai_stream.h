// One streamed OpenAI-compatible response (completions or chat) read into a RequestOutcome, event by event.
// A chunk carries tokens when it has choices, except a delta without string content (chat's role-only
// header) and a bare finish marker (empty text with a finish_reason). TTFT, ITL and latency are measured at those
// chunks, as `vllm bench serve` does. Usage may come in any chunk (with stream_options.include_usage, a last
// chunk with empty choices); the last one seen wins.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "client/load_metrics.h"

namespace inflight::client {

enum class ApiKind { Completions, Chat };

class OpenAiStreamReader {
 public:
  explicit OpenAiStreamReader(ApiKind api) : api_(api) {}

  // One event's data; `t_s` is when the bytes holding it arrived, seconds since the request was sent.
  void on_event(std::string_view data, double t_s);
  bool saw_done() const { return saw_done_; }
  // The response ended (cleanly): fills success, error, counts, TTFT, ITL, latency and text of `out`.
  // `client_prompt_tokens` is used when the server reports no usage.
  void finish(int64_t client_prompt_tokens, RequestOutcome* out);

 private:
  ApiKind api_;
  int64_t num_chunks_ = 0;
  double first_t_ = 0, last_t_ = 0;
  std::vector<double> itl_s_;
  std::string text_;
  int64_t usage_prompt_ = -1, usage_completion_ = -1;  // -1: not reported
  std::string error_;  // the first error chunk's message, or a malformed chunk
  bool saw_done_ = false;
};

}  // namespace inflight::client

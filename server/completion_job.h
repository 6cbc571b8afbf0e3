// CompletionJob: one /v1/completions or /v1/chat/completions request in flight. It submits one engine
// request per prompt, turns their events (posted by the engine thread onto the connection's strand) into
// one JSON response or a stream of SSE chunks, cancels them when the client goes away, and at the end
// writes the access log line and the latency metrics.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/request.h"
#include "server/completions.h"
#include "server/response_channel.h"
#include "server/server_state.h"

namespace inflight::server {

class CompletionJob : public std::enable_shared_from_this<CompletionJob> {
 public:
  // Call on channel->executor(). Throws like Engine::submit (std::invalid_argument, QueueFullError) or
  // ApiError (503 when shutting down) before anything is sent; no engine request is left behind then.
  static void start(ServerState& state, const ModelContext& model, CompletionRequest request,
                    std::shared_ptr<ResponseChannel> channel, std::string request_line);

  CompletionJob(ServerState& state, const ModelContext& model, CompletionRequest request,
                std::shared_ptr<ResponseChannel> channel, std::string request_line);
  ~CompletionJob() { state_.job_ended(); }
  CompletionJob(const CompletionJob&) = delete;
  CompletionJob& operator=(const CompletionJob&) = delete;

 private:
  using Clock = std::chrono::steady_clock;

  void submit_all();
  void begin_output();
  void on_event(int prompt_index, const engine::Event& ev);
  void on_token(int prompt_index, const engine::TokenEvent& t);
  void on_finished(int prompt_index, const engine::FinishedEvent& f);
  void on_client_gone();
  void finish();
  void send_chunk(int choice, const std::string& text, const std::vector<TokenLogprob>& tokens,
                  const std::string& finish_reason, bool first);
  // Tool calls (req_.parse_tool_calls): the content of choice `c` that can be streamed now (up to where a call
  // may start), and the end of a choice: its calls parsed out, streamed as tool_calls deltas.
  std::string releasable_content(size_t c);
  void finish_tool_calls(size_t c, engine::FinishReason reason);
  void send_error(int status, const std::string& type, const std::string& message);
  engine::Usage total_usage() const;
  void log_access(int status) const;

  ServerState& state_;
  const ModelContext& model_;
  CompletionRequest req_;
  std::shared_ptr<ResponseChannel> channel_;
  std::string request_line_;  // "POST /v1/completions", for the access log
  ResponseMeta meta_;
  int n_ = 1;                 // choices per prompt; choice index = prompt_index * n + i

  std::vector<uint64_t> engine_ids_;    // [prompts]
  std::vector<bool> prompt_done_;       // [prompts] the last event arrived
  std::vector<engine::Usage> usage_;    // [prompts] latest totals
  std::vector<ChoiceOutput> choices_;   // [prompts * n]
  std::vector<size_t> content_sent_;    // [prompts * n] with parse_tool_calls: bytes of text streamed as content
  std::vector<std::optional<Clock::time_point>> last_token_at_;  // [prompts * n] for inter-token latency
  int num_prompts_done_ = 0;
  bool abandoned_ = false;    // submission failed: events of the prompts already submitted are ignored
  bool client_gone_ = false;
  bool cancelled_ = false;    // a choice ended cancelled (client gone, or shutdown)
  std::string error_;         // the first engine error

  Clock::time_point received_at_;
  std::optional<Clock::time_point> first_token_at_;
};

}  // namespace inflight::server

#include "server/completion_job.h"

#include <algorithm>
#include <ctime>

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include "server/api_error.h"

namespace inflight::server {

namespace net = boost::asio;
using nlohmann::json;

namespace {

// Echoed prompt tokens: no logprobs, offsets into the prompt text.
std::vector<TokenLogprob> echo_tokens(const engine::Tokenizer& tokenizer, const std::vector<int32_t>& ids) {
  std::vector<TokenLogprob> out;
  engine::IncrementalDetokenizer detok(tokenizer, {});
  size_t offset = 0;
  for (int32_t id : ids) {
    out.push_back({id, false, 0.0f, {}, offset});
    offset += detok.push(id).size();
  }
  return out;
}

std::string sse_done() { return "[DONE]"; }

}  // namespace

void CompletionJob::start(ServerState& state, const ModelContext& model, CompletionRequest request,
                          std::shared_ptr<ResponseChannel> channel, std::string request_line) {
  if (!request.constraint.empty()) {
    state.metrics().count_constrained_request(request.constraint);
    state.metrics().grammar_compile_time.observe(request.constraint_compile_seconds);
  }
  auto job = std::make_shared<CompletionJob>(state, model, std::move(request), std::move(channel), std::move(request_line));
  job->submit_all();
  job->begin_output();
}

CompletionJob::CompletionJob(ServerState& state, const ModelContext& model, CompletionRequest request,
                             std::shared_ptr<ResponseChannel> channel, std::string request_line)
    : state_(state),
      model_(model),
      req_(std::move(request)),
      channel_(std::move(channel)),
      request_line_(std::move(request_line)),
      received_at_(channel_->received_at()) {
  meta_.api = req_.api;
  meta_.id = state.next_id(req_.api == Api::Chat ? "chatcmpl" : "cmpl");
  meta_.created = int64_t(std::time(nullptr));
  meta_.model = model.served_model_name;
  n_ = req_.engine.n;
  const size_t num_prompts = req_.prompts.size();
  prompt_done_.assign(num_prompts, false);
  usage_.assign(num_prompts, {});
  choices_.resize(num_prompts * size_t(n_));
  last_token_at_.resize(choices_.size());
  content_sent_.assign(choices_.size(), 0);
  state_.job_started();  // last: the destructor, which ends it, runs only for a constructed job
}

void CompletionJob::submit_all() {
  if (state_.stopping())
    throw ApiError(503, "server_error", "the server is shutting down", {}, "shutting_down");
  auto self = shared_from_this();
  const net::any_io_executor strand = channel_->executor();
  for (size_t i = 0; i < req_.prompts.size(); ++i) {
    engine::Request r = req_.engine;
    r.prompt_ids = req_.prompts[i].ids;
    // Runs on the engine thread: hand the event to the connection's strand and return.
    r.sink = [self, strand, i](const engine::Event& ev) {
      net::post(strand, [self, i, ev] { self->on_event(int(i), ev); });
    };
    try {
      engine_ids_.push_back(model_.engine->submit(std::move(r)));
    } catch (...) {
      abandoned_ = true;
      for (uint64_t id : engine_ids_) model_.engine->cancel(id);
      throw;
    }
  }
}

void CompletionJob::begin_output() {
  // Echo: each choice's text starts with its prompt (and its tokens, without logprobs).
  if (req_.echo) {
    for (size_t p = 0; p < req_.prompts.size(); ++p) {
      std::vector<TokenLogprob> tokens;
      if (req_.logprobs) tokens = echo_tokens(*model_.tokenizer, req_.prompts[p].ids);
      for (int i = 0; i < n_; ++i) {
        ChoiceOutput& c = choices_[p * size_t(n_) + size_t(i)];
        c.text = req_.prompts[p].text;
        c.logprobs = tokens;
      }
    }
  }
  if (req_.stream) {
    channel_->begin_events();
    for (size_t c = 0; c < choices_.size(); ++c) {
      if (req_.api == Api::Chat) send_chunk(int(c), "", {}, "", true);
      else if (req_.echo) send_chunk(int(c), choices_[c].text, choices_[c].logprobs, "", false);
    }
  }
  auto self = shared_from_this();
  channel_->watch_client([self] { self->on_client_gone(); });
}

void CompletionJob::on_event(int prompt_index, const engine::Event& ev) {
  if (abandoned_) return;
  if (auto* t = std::get_if<engine::TokenEvent>(&ev.value)) on_token(prompt_index, *t);
  else if (auto* f = std::get_if<engine::FinishedEvent>(&ev.value)) on_finished(prompt_index, *f);
  else if (auto* e = std::get_if<engine::ErrorEvent>(&ev.value); e && error_.empty()) error_ = e->message;
  if (!ev.last) return;
  prompt_done_[size_t(prompt_index)] = true;
  if (++num_prompts_done_ == int(req_.prompts.size())) finish();
}

void CompletionJob::on_token(int prompt_index, const engine::TokenEvent& t) {
  const Clock::time_point now = Clock::now();
  if (!first_token_at_) {
    first_token_at_ = now;
    state_.metrics().time_to_first_token.observe(std::chrono::duration<double>(now - received_at_).count());
  }
  const size_t c = size_t(prompt_index) * size_t(n_) + size_t(t.index);
  if (last_token_at_[c]) state_.metrics().inter_token_latency.observe(std::chrono::duration<double>(now - *last_token_at_[c]).count());
  last_token_at_[c] = now;
  if (client_gone_) return;

  ChoiceOutput& choice = choices_[c];
  std::vector<TokenLogprob> token;
  if (req_.logprobs) token.push_back({t.token_id, true, t.logprob, t.top_logprobs, choice.text.size()});
  choice.text += t.text;
  if (req_.stream && req_.parse_tool_calls) {
    const std::string content = releasable_content(c);
    if (!content.empty() || req_.logprobs) send_chunk(int(c), content, token, "", false);
  } else if (req_.stream) {
    if (!t.text.empty() || req_.logprobs) send_chunk(int(c), t.text, token, "", false);
  } else if (req_.logprobs) {
    choice.logprobs.push_back(std::move(token[0]));
  }
}

void CompletionJob::on_finished(int prompt_index, const engine::FinishedEvent& f) {
  const size_t p = size_t(prompt_index);
  const size_t c = p * size_t(n_) + size_t(f.index);
  usage_[p] = f.usage;
  if (f.reason == engine::FinishReason::Cancelled) cancelled_ = true;
  else if (f.index == 0) state_.metrics().request_queue_time.observe(f.queue_seconds);
  if (f.reason == engine::FinishReason::Error && error_.empty()) error_ = "the request failed in the engine";
  if (client_gone_ || c >= choices_.size()) return;

  ChoiceOutput& choice = choices_[c];
  // Beam search returns whole sequences here; sampled choices only their held-back tail.
  const std::string& text = f.text;
  choice.text += text;
  choice.finish_reason = engine::finish_reason_name(f.reason);
  if (req_.parse_tool_calls) return finish_tool_calls(c, f.reason);
  if (req_.stream && (f.reason == engine::FinishReason::Stop || f.reason == engine::FinishReason::Length))
    send_chunk(int(c), text, {}, choice.finish_reason, false);
}

std::string CompletionJob::releasable_content(size_t c) {
  const std::string& text = choices_[c].text;
  const size_t end = std::max(tool_call_start(req_.tool_format, text), content_sent_[c]);
  std::string content = text.substr(content_sent_[c], end - content_sent_[c]);
  content_sent_[c] = end;
  return content;
}

void CompletionJob::finish_tool_calls(size_t c, engine::FinishReason reason) {
  if (reason != engine::FinishReason::Stop && reason != engine::FinishReason::Length) return;
  ChoiceOutput& choice = choices_[c];
  std::optional<ParsedToolCalls> parsed = parse_tool_calls(req_.tool_format, choice.text);
  if (!parsed) {
    if (req_.stream) send_chunk(int(c), choice.text.substr(content_sent_[c]), {}, choice.finish_reason, false);
    return;
  }
  choice.text = std::move(parsed->content);
  choice.tool_calls = std::move(parsed->calls);
  for (size_t k = 0; k < choice.tool_calls.size(); ++k) choice.tool_call_ids.push_back(make_tool_call_id());
  choice.finish_reason = "tool_calls";
  if (!req_.stream) return;
  // The content not streamed yet, then per call: its id, type and name, then its arguments.
  if (content_sent_[c] < choice.text.size()) send_chunk(int(c), choice.text.substr(content_sent_[c]), {}, "", false);
  auto send_delta = [&](json delta, const std::string& finish_reason) {
    channel_->send_event(dump_json(delta_chunk_json(meta_, int(c), std::move(delta), finish_reason, req_.include_usage)));
  };
  for (size_t k = 0; k < choice.tool_calls.size(); ++k) {
    const ToolCall& call = choice.tool_calls[k];
    const json head = {{"index", k}, {"id", choice.tool_call_ids[k]}, {"type", "function"},
                       {"function", {{"name", call.name}, {"arguments", ""}}}};
    send_delta({{"tool_calls", json::array({head})}}, "");
    send_delta({{"tool_calls", json::array({{{"index", k}, {"function", {{"arguments", call.arguments}}}}})}}, "");
  }
  send_delta(json::object(), choice.finish_reason);
}

void CompletionJob::on_client_gone() {
  if (client_gone_) return;
  client_gone_ = true;
  for (size_t i = 0; i < engine_ids_.size(); ++i)
    if (!prompt_done_[i]) model_.engine->cancel(engine_ids_[i]);
}

void CompletionJob::send_chunk(int choice, const std::string& text, const std::vector<TokenLogprob>& tokens,
                               const std::string& finish_reason, bool first) {
  const json chunk = chunk_json(meta_, *model_.tokenizer, choice, text, tokens, req_.logprobs, finish_reason, first,
                                req_.include_usage);
  channel_->send_event(dump_json(chunk));
}

void CompletionJob::send_error(int status, const std::string& type, const std::string& message) {
  const std::string code = status == 503 ? "shutting_down" : model_.engine->alive() ? "" : "engine_dead";
  const json body = error_json(type, message, {}, code);
  if (req_.stream) {
    channel_->send_event(dump_json(body));
    channel_->send_event(sse_done());
    channel_->end_events();
    return;
  }
  HttpResponse res{boost::beast::http::int_to_status(unsigned(status)), 11};
  res.set(boost::beast::http::field::content_type, "application/json");
  if (status == 503) res.set(boost::beast::http::field::retry_after, std::to_string(state_.config().retry_after_seconds));
  res.body() = dump_json(body);
  channel_->send(std::move(res));
}

void CompletionJob::finish() {
  state_.metrics().e2e_request_latency.observe(std::chrono::duration<double>(Clock::now() - received_at_).count());
  int status = 200;
  if (client_gone_ || channel_->client_gone()) {
    status = 499;  // nginx's "client closed request"; nothing is sent
  } else if (!error_.empty()) {
    status = 500;
    send_error(status, "server_error", "generation failed: " + error_);
  } else if (cancelled_) {
    status = 503;
    send_error(status, "server_error", state_.stopping() ? "the server is shutting down; the request was cancelled"
                                                         : "the request was cancelled");
  } else if (req_.stream) {
    if (req_.include_usage) channel_->send_event(dump_json(usage_chunk_json(meta_, total_usage())));
    channel_->send_event(sse_done());
    channel_->end_events();
  } else {
    HttpResponse res{boost::beast::http::status::ok, 11};
    res.set(boost::beast::http::field::content_type, "application/json");
    res.body() = dump_json(response_json(meta_, *model_.tokenizer, choices_, req_.logprobs, total_usage()));
    channel_->send(std::move(res));
  }
  log_access(status);
}

engine::Usage CompletionJob::total_usage() const {
  engine::Usage total;
  for (const engine::Usage& u : usage_) {
    total.prompt_tokens += u.prompt_tokens;
    total.completion_tokens += u.completion_tokens;
    total.cached_tokens += u.cached_tokens;
  }
  return total;
}

void CompletionJob::log_access(int status) const {
  const engine::Usage u = total_usage();
  const double total = std::chrono::duration<double>(Clock::now() - received_at_).count();
  const std::string ttft =
      first_token_at_ ? fmt::format("{:.3f}s", std::chrono::duration<double>(*first_token_at_ - received_at_).count()) : "-";
  spdlog::info("{} \"{}\" {}{} prompt_tokens={} completion_tokens={} cached_tokens={} ttft={} total={:.3f}s", meta_.id,
               request_line_, status, req_.stream ? " stream" : "", u.prompt_tokens, u.completion_tokens,
               u.cached_tokens, ttft, total);
}

}  // namespace inflight::server

// The OpenAI-compatible routes: dispatch by path and method, the API key check, and the one wrapper
// every handler runs inside: std::invalid_argument becomes a 400 JSON error, ApiError its own status,
// engine::QueueFullError 429, anything else 500.
//
//   GET  /                       the web page (index.html; GET /webui/<file> its other files); 404 with --no-webui
//   GET  /health                 200 ready; 503 while the model loads or if the engine thread died
//   GET  /metrics                Prometheus text
//   GET  /v1/models              the served model (also GET /v1/models/{name})
//   GET  /v1/status              the live engine state (see status.h)
//   POST /v1/completions         see completions.h
//   POST /v1/chat/completions
//   POST /tokenize, /detokenize  see tokenize.h
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "server/response_channel.h"
#include "server/server_state.h"

namespace inflight::server {

class Router {
 public:
  explicit Router(ServerState& state) : state_(state) {}

  // Answers `request` through `channel`, now or, for generation, as events arrive. Call on
  // channel->executor().
  void handle(HttpRequest request, const std::shared_ptr<ResponseChannel>& channel);

 private:
  // A response to send now, or nullopt when a CompletionJob answers later.
  std::optional<HttpResponse> dispatch(const HttpRequest& request, const std::shared_ptr<ResponseChannel>& channel,
                                       const std::string& request_line);
  bool authorized(const HttpRequest& request) const;
  const ModelContext& require_model() const;  // ApiError 503 while loading, when dead, when stopping

  HttpResponse health() const;
  HttpResponse models(const std::string& name) const;
  HttpResponse metrics() const;
  HttpResponse status() const;
  HttpResponse web_page(std::string_view path) const;

  ServerState& state_;
};

// A JSON response with the body serialised; 429/503 get Retry-After.
HttpResponse json_response(int status, const nlohmann::json& body, int retry_after_seconds);

}  // namespace inflight::server

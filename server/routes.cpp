#include "server/routes.h"

#include <cctype>
#include <cstring>

#include <spdlog/spdlog.h>

#include "server/api_error.h"
#include "server/completion_job.h"
#include "server/completions.h"
#include "server/constant_time.h"
#include "server/log_escape.h"
#include "server/status.h"
#include "server/webui.h"
#include "server/tokenize.h"

namespace inflight::server {

namespace http = boost::beast::http;
using nlohmann::json;

namespace {

json parse_body(const HttpRequest& request) {
  try {
    return json::parse(request.body());
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number past double (1e400)
    throw BadRequest("", std::string("the request body is not valid JSON: ") + e.what());
  }
}

struct Route {
  const char* path;
  http::verb method;
  bool prefix;  // /v1/models/{name}
};
constexpr Route kRoutes[] = {{"/", http::verb::get, false},
                             {"/webui/", http::verb::get, true},
                             {"/health", http::verb::get, false},
                             {"/metrics", http::verb::get, false},
                             {"/v1/models", http::verb::get, false},
                             {"/v1/models/", http::verb::get, true},
                             {"/v1/status", http::verb::get, false},
                             {"/v1/completions", http::verb::post, false},
                             {"/v1/chat/completions", http::verb::post, false},
                             {"/tokenize", http::verb::post, false},
                             {"/detokenize", http::verb::post, false}};

}  // namespace

HttpResponse json_response(int status, const json& body, int retry_after_seconds) {
  HttpResponse res{http::int_to_status(unsigned(status)), 11};
  res.set(http::field::content_type, "application/json");
  if (status == 429 || status == 503) res.set(http::field::retry_after, std::to_string(retry_after_seconds));
  res.body() = dump_json(body);
  return res;
}

void Router::handle(HttpRequest request, const std::shared_ptr<ResponseChannel>& channel) {
  std::string target(request.target());
  // Logged (here and by the CompletionJob) inside quotes: escaped, so a request cannot forge log lines.
  const std::string request_line = log_escape(std::string(request.method_string()) + " " + target);
  std::optional<HttpResponse> response;
  try {
    response = dispatch(request, channel, request_line);
  } catch (...) {
    int status = 500;
    const json body = current_exception_json(&status);
    response = json_response(status, body, state_.config().retry_after_seconds);
  }
  if (!response) return;  // a CompletionJob answers and logs
  const auto elapsed = std::chrono::steady_clock::now() - channel->received_at();
  spdlog::info("{} \"{}\" {} total={:.3f}s", state_.next_id("req"), request_line, response->result_int(),
               std::chrono::duration<double>(elapsed).count());
  channel->send(std::move(*response));
}

std::optional<HttpResponse> Router::dispatch(const HttpRequest& request, const std::shared_ptr<ResponseChannel>& channel,
                                             const std::string& request_line) {
  std::string_view path(request.target().data(), request.target().size());
  if (const size_t q = path.find('?'); q != std::string_view::npos) path = path.substr(0, q);
  const Route* found = nullptr;
  bool path_known = false;
  for (const Route& r : kRoutes) {
    const bool match = r.prefix ? path.size() > std::strlen(r.path) && path.rfind(r.path, 0) == 0 : path == r.path;
    if (!match) continue;
    path_known = true;
    if (request.method() == r.method) found = &r;
  }
  const int retry_after = state_.config().retry_after_seconds;
  if (!state_.config().webui && (path == "/" || path.rfind("/webui/", 0) == 0)) path_known = false;
  if (!path_known)
    return json_response(404, error_json("invalid_request_error", "no route " + std::string(path), {}, "not_found"), retry_after);
  if (found == nullptr) {
    HttpResponse res = json_response(
        405, error_json("invalid_request_error", "method " + std::string(request.method_string()) + " is not allowed on " + std::string(path), {}, "method_not_allowed"),
        retry_after);
    for (const Route& r : kRoutes)
      if (r.prefix ? path.rfind(r.path, 0) == 0 : path == r.path) res.set(http::field::allow, http::to_string(r.method));
    return res;
  }
  const std::string_view route = found->path;
  if (route == "/" || route == "/webui/") return web_page(path);
  if (route == "/health") return health();
  if (route == "/metrics") return metrics();
  if (!authorized(request)) {
    HttpResponse res = json_response(
        401, error_json("invalid_request_error", "missing or incorrect API key (send Authorization: Bearer <key>)", {}, "invalid_api_key"),
        retry_after);
    res.set(http::field::www_authenticate, "Bearer");
    return res;
  }
  if (route == "/v1/models") return models({});
  if (route == "/v1/models/") return models(std::string(path.substr(route.size())));
  if (route == "/v1/status") return status();

  const ModelContext& model = require_model();
  const json body = parse_body(request);
  if (route == "/tokenize") {
    const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(request.body());  // the client's key order
    return json_response(200, tokenize_response(body, model, &ordered), retry_after);
  }
  if (route == "/detokenize") return json_response(200, detokenize_response(body, model), retry_after);
  const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(request.body());  // the client's key order
  CompletionRequest parsed = route == "/v1/chat/completions" ? parse_chat_request(body, model, &ordered)
                                                             : parse_completion_request(body, model, &ordered);
  CompletionJob::start(state_, model, std::move(parsed), channel, request_line);
  return std::nullopt;
}

bool Router::authorized(const HttpRequest& request) const {
  const std::string& key = state_.config().api_key;
  if (key.empty()) return true;
  auto it = request.find(http::field::authorization);
  if (it == request.end()) return false;
  std::string_view value(it->value().data(), it->value().size());
  constexpr std::string_view kBearer = "Bearer ";
  if (value.size() < kBearer.size()) return false;
  for (size_t i = 0; i < kBearer.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(value[i])) != std::tolower(static_cast<unsigned char>(kBearer[i]))) return false;
  return equal_constant_time(value.substr(kBearer.size()), key);
}

const ModelContext& Router::require_model() const {
  const ModelContext* model = state_.model();
  if (model == nullptr) throw ApiError(503, "server_error", "the model is loading; try again shortly", {}, "loading");
  if (state_.stopping()) throw ApiError(503, "server_error", "the server is shutting down", {}, "shutting_down");
  if (!model->engine->alive()) throw ApiError(503, "server_error", "the engine thread has stopped", {}, "engine_dead");
  return *model;
}

HttpResponse Router::health() const {
  const ModelContext* model = state_.model();
  const int retry_after = state_.config().retry_after_seconds;
  if (model == nullptr)
    return json_response(503, error_json("server_error", "the model is loading", {}, "loading"), retry_after);
  if (!model->engine->alive())
    return json_response(503, error_json("server_error", "the engine thread has stopped", {}, "engine_dead"), retry_after);
  if (state_.stopping())  // a load balancer moves new requests to another replica
    return json_response(503, error_json("server_error", "the server is shutting down", {}, "shutting_down"), retry_after);
  return json_response(200, {{"status", "ok"}}, retry_after);
}

HttpResponse Router::models(const std::string& name) const {
  const ModelContext& model = require_model();
  const json card = {{"id", model.served_model_name},
                     {"object", "model"},
                     {"created", model.created},
                     {"owned_by", "inflight"},
                     {"root", model.model_path.empty() ? model.served_model_name : model.model_path},
                     {"max_model_len", model.max_model_len}};
  const int retry_after = state_.config().retry_after_seconds;
  if (name.empty()) return json_response(200, {{"object", "list"}, {"data", json::array({card})}}, retry_after);
  if (name != model.served_model_name)
    return json_response(404, error_json("invalid_request_error", "The model `" + name + "` does not exist", "model", "model_not_found"),
                         retry_after);
  return json_response(200, card, retry_after);
}

HttpResponse Router::web_page(std::string_view path) const {
  const WebAsset* asset = find_web_asset(path);
  if (asset == nullptr)
    return json_response(404, error_json("invalid_request_error", "no route " + std::string(path), {}, "not_found"),
                         state_.config().retry_after_seconds);
  HttpResponse res{http::status::ok, 11};
  res.set(http::field::content_type, std::string(web_content_type(asset->name)));
  res.set(http::field::cache_control, "no-cache");
  res.set("X-Content-Type-Options", "nosniff");
  // Everything the page loads and calls is on this server: no CDN, no inline script.
  res.set("Content-Security-Policy",
          "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'");
  res.body() = std::string(asset->body);
  return res;
}

HttpResponse Router::status() const {
  const ModelContext& model = require_model();
  const engine::EngineStats stats = model.engine->stats();
  const std::vector<engine::StepRecord> steps = model.engine->recent_steps();
  const std::vector<cache::BlockState> blocks = model.engine->block_states();
  return json_response(200, status_json(model, stats, steps, blocks, std::chrono::steady_clock::now()),
                       state_.config().retry_after_seconds);
}

HttpResponse Router::metrics() const {
  const ModelContext* model = state_.model();
  std::optional<engine::EngineStats> stats;
  if (model != nullptr) stats = model->engine->stats();
  HttpResponse res{http::status::ok, 11};
  res.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
  res.body() = state_.metrics().render(stats ? &*stats : nullptr);
  return res;
}

}  // namespace inflight::server

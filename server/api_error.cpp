#include "server/api_error.h"

#include <exception>

#include <spdlog/spdlog.h>

#include "engine/engine.h"

namespace inflight::server {

using nlohmann::json;

json error_json(const std::string& type, const std::string& message, const std::string& param,
                const std::string& code) {
  json err = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) err["param"] = param;
  if (!code.empty()) err["code"] = code;
  return {{"error", err}};
}

json error_json(const ApiError& e) { return error_json(e.type(), e.what(), e.param(), e.code()); }

json current_exception_json(int* status) {
  try {
    throw;
  } catch (const ApiError& e) {
    *status = e.status();
    return error_json(e);
  } catch (const BadRequest& e) {
    *status = 400;
    return error_json("invalid_request_error", e.what(), e.param());
  } catch (const std::invalid_argument& e) {
    *status = 400;
    return error_json("invalid_request_error", e.what());
  } catch (const engine::EngineDeadError& e) {
    *status = 503;
    return error_json("server_error", e.what(), {}, "engine_dead");
  } catch (const engine::QueueFullError& e) {
    *status = 429;
    return error_json("rate_limit_error", e.what(), {}, "queue_full");
  } catch (const std::exception& e) {
    *status = 500;
    spdlog::error("internal error: {}", e.what());
    return error_json("server_error", std::string("internal error: ") + e.what());
  } catch (...) {
    *status = 500;
    spdlog::error("internal error: unknown exception");
    return error_json("server_error", "internal error");
  }
}

std::string dump_json(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace inflight::server

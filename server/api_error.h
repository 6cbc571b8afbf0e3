// Errors for the client, in OpenAI's envelope: {"error": {"message", "type", "param", "code"}}.
#pragma once
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace inflight::server {

// A failed request with its HTTP status. `param` names the request field at fault and `code` is a
// short machine-readable reason; either may be empty (null in the envelope).
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string type, const std::string& message, std::string param = {}, std::string code = {})
      : std::runtime_error(message), status_(status), type_(std::move(type)), param_(std::move(param)),
        code_(std::move(code)) {}
  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }
  // 429 and 503 answers carry Retry-After.
  bool retryable() const { return status_ == 429 || status_ == 503; }

 private:
  int status_;
  std::string type_, param_, code_;
};

// Bad user input naming the field (400 invalid_request_error). A std::invalid_argument, so that the route
// wrapper treats it like every other invalid_argument, with the field added.
class BadRequest : public std::invalid_argument {
 public:
  BadRequest(std::string param, const std::string& message)
      : std::invalid_argument(message), param_(std::move(param)) {}
  const std::string& param() const { return param_; }

 private:
  std::string param_;
};

// The envelope; empty param/code become null.
nlohmann::json error_json(const std::string& type, const std::string& message, const std::string& param = {},
                          const std::string& code = {});
nlohmann::json error_json(const ApiError& e);

// The envelope of the exception in flight (call inside a catch block): ApiError as is, invalid_argument
// as 400, engine::QueueFullError as 429, anything else as 500. Sets *status.
nlohmann::json current_exception_json(int* status);

// Serialises a response body; invalid UTF-8 (a lone byte token) becomes U+FFFD instead of throwing.
std::string dump_json(const nlohmann::json& j);

}  // namespace inflight::server

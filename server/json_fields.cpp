#include "server/json_fields.h"

#include <cmath>
#include <cstdio>

#include "server/api_error.h"

namespace inflight::server {

using nlohmann::json;

namespace {

std::string range_text(double min, double max) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "[%.10g, %.10g]", min, max);
  return buf;
}

}  // namespace

const json* find_field(const json& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

std::optional<bool> get_bool(const json& body, const char* name) {
  const json* v = find_field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) throw BadRequest(name, std::string(name) + " must be a boolean");
  return v->get<bool>();
}

std::optional<std::string> get_string(const json& body, const char* name) {
  const json* v = find_field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) throw BadRequest(name, std::string(name) + " must be a string");
  return v->get<std::string>();
}

std::optional<int64_t> get_int(const json& body, const char* name, int64_t min, int64_t max) {
  const json* v = find_field(body, name);
  if (v == nullptr) return std::nullopt;
  int64_t x = 0;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX))
      throw BadRequest(name, std::string(name) + " is out of range");
    x = v->get<int64_t>();
  } else if (v->is_number_float() && std::isfinite(v->get<double>()) && std::floor(v->get<double>()) == v->get<double>() &&
             std::fabs(v->get<double>()) < 0x1p62) {
    x = int64_t(v->get<double>());
  } else {
    throw BadRequest(name, std::string(name) + " must be an integer");
  }
  if (x < min || x > max)
    throw BadRequest(name, std::string(name) + " must be in " + range_text(double(min), double(max)) + ", got " +
                               std::to_string(x));
  return x;
}

std::optional<double> get_number(const json& body, const char* name, double min, double max) {
  const json* v = find_field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) throw BadRequest(name, std::string(name) + " must be a number");
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < min || x > max)
    throw BadRequest(name, std::string(name) + " must be in " + range_text(min, max) + ", got " + v->dump());
  return x;
}

}  // namespace inflight::server

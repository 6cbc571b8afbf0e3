// Typed reads of optional fields of a request body. null counts as absent; a present field of the wrong
// type or out of range throws BadRequest naming it.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace inflight::server {

const nlohmann::json* find_field(const nlohmann::json& body, const char* name);  // null when absent or null
std::optional<bool> get_bool(const nlohmann::json& body, const char* name);
std::optional<std::string> get_string(const nlohmann::json& body, const char* name);
// Integers in [min, max]; a float with no fractional part (e.g. 16.0) counts as an integer.
std::optional<int64_t> get_int(const nlohmann::json& body, const char* name, int64_t min, int64_t max);
// Finite numbers in [min, max].
std::optional<double> get_number(const nlohmann::json& body, const char* name, double min, double max);

}  // namespace inflight::server

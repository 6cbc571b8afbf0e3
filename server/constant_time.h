// Comparing a secret (the API key) with what a client sent, in a time that does not tell how much of a
// guess was right.
#pragma once
#include <string_view>

namespace inflight::server {

// Whether `given` equals `secret`. Every byte of `given` is compared (no early exit at the first
// difference nor at a length mismatch); the time depends on given.size() only, which the client knows.
// `secret` may be empty (then only an empty `given` matches).
bool equal_constant_time(std::string_view given, std::string_view secret);

}  // namespace inflight::server

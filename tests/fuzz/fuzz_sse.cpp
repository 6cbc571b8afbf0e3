// The bench client's SSE parser: the events must not depend on how the bytes are split. The input is fed
// whole to one parser and, cut at points drawn from its first bytes, to another; both must hand on the
// same events in the same order.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "client/sse_parser.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t num_cuts = data[0] % 8;
  if (size < 1 + num_cuts) return 0;
  std::vector<size_t> cuts;
  for (size_t i = 0; i < num_cuts; ++i) cuts.push_back(data[1 + i]);
  const std::string_view stream(reinterpret_cast<const char*>(data) + 1 + num_cuts, size - 1 - num_cuts);

  std::vector<std::string> whole, pieces;
  inflight::client::SseParser a;
  a.feed(stream, [&](std::string_view d) { whole.emplace_back(d); });
  a.finish([&](std::string_view d) { whole.emplace_back(d); });

  inflight::client::SseParser b;
  size_t pos = 0;
  for (size_t cut : cuts) {
    const size_t n = std::min(cut, stream.size() - pos);
    b.feed(stream.substr(pos, n), [&](std::string_view d) { pieces.emplace_back(d); });
    pos += n;
  }
  b.feed(stream.substr(pos), [&](std::string_view d) { pieces.emplace_back(d); });
  b.finish([&](std::string_view d) { pieces.emplace_back(d); });
  if (whole != pieces) __builtin_trap();
  return 0;
}

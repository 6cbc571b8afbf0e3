// Incremental server-sent-events parser (the WHATWG event-stream format) for the load-test client:
// bytes arrive in arbitrary pieces; each complete event's data is handed on once its blank line arrives.
#pragma once
#include <functional>
#include <string>
#include <string_view>

namespace inflight::client {

class SseParser {
 public:
  // Called once per event that had at least one `data:` line; multi-line data is joined with '\n'.
  using EventFn = std::function<void(std::string_view data)>;

  // Lines end in "\n", "\r\n" or "\r", possibly split across calls. `event:`, `id:`, `retry:` and
  // comment (":") lines are ignored: OpenAI-compatible servers carry everything in `data:`.
  void feed(std::string_view bytes, const EventFn& on_event);
  // The stream ended: an event whose blank line never came is still handed on (llama.cpp and some
  // proxies end the last event with a single newline).
  void finish(const EventFn& on_event);

 private:
  void take_line(std::string_view line, const EventFn& on_event);

  std::string line_;        // the line so far, without its terminator
  std::string data_;        // the current event's data lines, '\n'-joined
  bool has_data_ = false;
  bool after_cr_ = false;   // the last byte was '\r': a following '\n' belongs to the same terminator
};

}  // namespace inflight::client

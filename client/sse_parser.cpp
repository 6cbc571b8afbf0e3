#include "client/sse_parser.h"

namespace inflight::client {

void SseParser::feed(std::string_view bytes, const EventFn& on_event) {
  for (char c : bytes) {
    if (after_cr_) {
      after_cr_ = false;
      if (c == '\n') continue;
    }
    if (c == '\r' || c == '\n') {
      after_cr_ = c == '\r';
      take_line(line_, on_event);
      line_.clear();
    } else {
      line_.push_back(c);
    }
  }
}

void SseParser::finish(const EventFn& on_event) {
  if (!line_.empty()) take_line(line_, on_event);
  line_.clear();
  take_line({}, on_event);
}

void SseParser::take_line(std::string_view line, const EventFn& on_event) {
  if (line.empty()) {
    if (has_data_) on_event(data_);
    data_.clear();
    has_data_ = false;
    return;
  }
  const size_t colon = line.find(':');
  const std::string_view field = line.substr(0, colon);
  if (field != "data") return;
  std::string_view value = colon == std::string_view::npos ? std::string_view{} : line.substr(colon + 1);
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (has_data_) data_.push_back('\n');
  data_.append(value);
  has_data_ = true;
}

}  // namespace inflight::client

#include "engine/stop_checker.h"

#include <algorithm>

namespace inflight::engine {

StopChecker::StopChecker(std::vector<std::string> stops) : stops_(std::move(stops)) {
  stops_.erase(std::remove(stops_.begin(), stops_.end(), std::string()), stops_.end());
}

std::string StopChecker::push(const std::string& text) {
  if (stopped_) return {};
  held_ += text;
  // The earliest stop string wins.
  size_t first = std::string::npos;
  for (const std::string& s : stops_) first = std::min(first, held_.find(s));
  if (first != std::string::npos) {
    std::string out = held_.substr(0, first);
    held_.clear();
    stopped_ = true;
    return out;
  }
  // Hold back the longest tail of held_ that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const std::string& s : stops_) {
    for (size_t n = std::min(s.size() - 1, held_.size()); n > keep; --n) {
      if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
        keep = n;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopChecker::flush() {
  std::string out;
  if (!stopped_) out.swap(held_);
  return out;
}

}  // namespace inflight::engine

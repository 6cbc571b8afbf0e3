// StopChecker: finds stop strings in a sequence's growing text. Text that might still become a stop
// string is held back and never emitted if it does.
#pragma once
#include <string>
#include <vector>

namespace inflight::engine {

class StopChecker {
 public:
  StopChecker() = default;
  explicit StopChecker(std::vector<std::string> stops);

  // Appends `text`; returns the text that is now safe to emit. Sets stopped() when a stop string
  // appeared: the returned text then ends right before it and nothing after is kept.
  std::string push(const std::string& text);
  // Everything still held back (at the end of generation).
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace inflight::engine

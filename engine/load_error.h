// LoadError: a model, tokenizer or config file that cannot be used. The message names the file and,
// where there is one, the tensor or key, and says what is wrong.
#pragma once
#include <stdexcept>
#include <string>

namespace inflight::engine {

class LoadError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] inline void throw_load_error(const std::string& file, const std::string& what) {
  throw LoadError(file + ": " + what);
}

}  // namespace inflight::engine

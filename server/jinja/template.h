// A Jinja template, as chat templates are written: parsed once, rendered per request with the
// conversation as the context. Rendering is pure (no I/O; strftime_now reads the clock) and a parsed
// Template may be rendered from several threads at once.
#pragma once
#include <string>
#include <string_view>

#include "server/jinja/ast.h"
#include "server/jinja/value.h"

namespace inflight::server::jinja {

class Template {
 public:
  // Throws Error (Syntax) naming the line.
  explicit Template(std::string_view source);

  // `context`: an object of variables (messages, add_generation_prompt, bos_token, ...). Throws Error
  // (Render: a type error, an undefined call; Raised: the template's raise_exception).
  std::string render(const Value& context) const;

 private:
  Body program_;
};

}  // namespace inflight::server::jinja

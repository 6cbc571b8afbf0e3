// Rendering a parsed template: statements write text, expressions evaluate with Python's semantics.
// Scopes follow Jinja: a for loop's body (each iteration) and a macro's body are new scopes, so a
// `set` inside them is gone after; `if` blocks share their enclosing scope; `namespace()` objects carry
// values out of loops.
#pragma once
#include <string>

#include "server/jinja/ast.h"
#include "server/jinja/value.h"

namespace inflight::server::jinja {

// `context` is an object of the template's variables, over the globals. Throws Error (Render, Raised).
std::string render(const Body& program, const Value& context);

}  // namespace inflight::server::jinja

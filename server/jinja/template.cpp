#include "server/jinja/template.h"

#include "server/jinja/interpreter.h"
#include "server/jinja/lexer.h"
#include "server/jinja/parser.h"

namespace inflight::server::jinja {

Template::Template(std::string_view source) : program_(parse(tokenize(source))) {}

std::string Template::render(const Value& context) const { return jinja::render(program_, context); }

}  // namespace inflight::server::jinja

// `inflight render-template`: renders a chat template (a built-in's name, a Jinja file, or a model's own)
// with contexts from JSON, with the same Jinja engine `inflight serve` uses. For checking a template by hand and for
// the cross-check against @huggingface/jinja (tests/chat_templates/).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "engine/model_loader.h"
#include "server/chat_template.h"
#include "server/jinja/template.h"

namespace inflight::cli {

namespace {

struct RenderTemplateFlags {
  std::string template_name;
  std::string model;     // render the model's own template (else llama2) with its tokenizer's bos/eos
  std::string contexts;  // a JSON file; empty: stdin
  bool print_source = false;
};

std::string read_all(std::istream& in) { return std::string(std::istreambuf_iterator<char>(in), {}); }

void run_render_template(const RenderTemplateFlags& f) {
  std::string source;
  nlohmann::ordered_json defaults = nlohmann::ordered_json::object();  // variables a context may leave out
  if (f.template_name.empty() && f.model.empty()) throw std::invalid_argument("give --template or --model");
  if (!f.model.empty()) {
    const engine::LoadedModel loaded = engine::load_model(f.model);
    const engine::Tokenizer& tok = loaded.tokenizer;
    if (tok.bos_id() >= 0 && tok.bos_id() < tok.vocab_size()) defaults["bos_token"] = tok.piece(tok.bos_id());
    if (tok.eos_id() >= 0 && tok.eos_id() < tok.vocab_size()) defaults["eos_token"] = tok.piece(tok.eos_id());
    if (f.template_name.empty()) source = server::choose_chat_template("auto", loaded.chat_template).source;
  }
  if (!f.template_name.empty()) {
    if (const std::string* builtin = server::builtin_chat_template(f.template_name)) {
      source = *builtin;
    } else {
      std::ifstream in(f.template_name, std::ios::binary);
      if (!in) throw std::invalid_argument("--template: '" + f.template_name + "' is neither a built-in (" +
                                           server::chat_template_names() + ") nor a readable file");
      source = read_all(in);
    }
  }
  if (f.print_source) {
    std::fwrite(source.data(), 1, source.size(), stdout);
    return;
  }
  const server::jinja::Template tmpl(source);  // a syntax error ends the command with its message

  std::string text;
  if (f.contexts.empty()) {
    text = read_all(std::cin);
  } else {
    std::ifstream in(f.contexts, std::ios::binary);
    if (!in) throw std::invalid_argument("--contexts: cannot read '" + f.contexts + "'");
    text = read_all(in);
  }
  const std::string where = f.contexts.empty() ? "standard input" : f.contexts;
  const nlohmann::ordered_json contexts = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (contexts.is_discarded()) throw std::invalid_argument(where + ": not valid JSON");
  auto with_defaults = [&](const nlohmann::ordered_json& context) {
    nlohmann::ordered_json full = defaults;
    for (auto it = context.begin(); it != context.end(); ++it) full[it.key()] = it.value();
    return server::jinja::from_json(full);
  };
  if (contexts.is_object()) {
    const std::string out = tmpl.render(with_defaults(contexts));
    std::fwrite(out.data(), 1, out.size(), stdout);
    return;
  }
  if (!contexts.is_array()) throw std::invalid_argument(where + ": expected a context object or a list of them");
  nlohmann::ordered_json results = nlohmann::ordered_json::array();
  for (const nlohmann::ordered_json& context : contexts) {
    if (!context.is_object()) throw std::invalid_argument(where + ": every context must be an object");
    try {
      results.push_back({{"text", tmpl.render(with_defaults(context))}});
    } catch (const server::jinja::Error& e) {
      results.push_back({{e.kind() == server::jinja::Error::Kind::Raised ? "raised" : "error", e.what()}});
    }
  }
  std::cout << results.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << '\n';
}

}  // namespace

void add_render_template_command(CLI::App& app) {
  auto flags = std::make_shared<RenderTemplateFlags>();
  CLI::App* cmd = app.add_subcommand(
      "render-template", "Render a chat template with JSON contexts (messages, add_generation_prompt, bos_token, ...)");
  cmd->add_option("--template", flags->template_name, "a built-in (" + server::chat_template_names() + ") or a Jinja file");
  cmd->add_option("--model,-m", flags->model,
                  "a model (GGUF or HF folder): its own template (else llama2) unless --template is given, and its "
                  "tokenizer's bos_token / eos_token unless a context sets them");
  cmd->add_option("--contexts", flags->contexts,
                  "JSON file: one context object (prints the text) or a list of them (prints a JSON list of "
                  "{text} / {raised} / {error}); default: standard input");
  cmd->add_flag("--print-source", flags->print_source, "print the template's source and exit");
  cmd->callback([flags] { run_render_template(*flags); });
}

}  // namespace inflight::cli

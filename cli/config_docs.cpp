// `inflight config-docs` (hidden): prints docs/CONFIGURATION.md, the reference of every command's flags, serve's
// config-file keys and the environment variables. The tables come from the CLI11 definitions themselves, so
// that a flag, its value type and its default cannot be missing or stale there; test_cli compares the
// committed file with what this prints.
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "server/server_config.h"

namespace inflight::cli {

namespace {

// What the config-file settings that no flag sets mean; a setting with a flag is described by the flag's help.
// A new setting without a flag and without a line here stops the generator (and so fails test_cli).
const std::map<std::string, std::string>& config_only_settings() {
  static const std::map<std::string, std::string> settings = {
      {"enable_prefix_caching",
       "Reuse the KV cache blocks of a prompt prefix already computed for an earlier request (false: every "
       "prompt is prefilled in full)"},
      {"max_body_bytes", "Largest request body in bytes; a larger one gets 413"},
      {"max_header_bytes", "Largest request header in bytes; a larger one gets 431"},
      {"request_timeout_seconds",
       "Seconds to receive one whole request; also how long an idle keep-alive connection stays open"},
      {"write_timeout_seconds", "Seconds each write to a client may take before the connection is closed"},
      {"retry_after_seconds", "The Retry-After header of 429 and 503 answers, in seconds"},
  };
  return settings;
}

struct EnvVar {
  const char* name;
  const char* read_by;
  const char* meaning;
};

// Every variable the code reads (std::getenv); test_cli checks that the sources read no other.
constexpr EnvVar kEnvVars[] = {
    {"OPENAI_API_KEY", "bench", "The bearer token sent when --api-key is not given"},
    {"INFLIGHT_NUM_THREADS", "every command that loads a model",
     "Compute threads where --threads is 0 or absent; unset or not a positive number: all cores"},
    {"INFLIGHT_ISA", "serve, generate",
     "The CPU kernels to run: scalar, avx2, avx512, avx512vnni or avx512bf16 (default: the best the CPU "
     "supports; an instruction set this CPU lacks is ignored with a warning). For comparing kernels"},
    {"INFLIGHT_DEBUG_LOAD_DELAY_MS", "serve",
     "Test hook, not for production: milliseconds to wait before loading the model, so that /health can be "
     "seen answering 503"},
    {"INFLIGHT_DEBUG_STEP_DELAY_MS", "serve",
     "Test hook, not for production: milliseconds the engine sleeps after every step, so that a stream can be "
     "cut or /v1/status read mid-generation"},
    {"INFLIGHT_DEBUG_STEP_COST", "serve",
     "Test hook, not for production: the step cost the scheduler plans --max-step-ms with, "
     "\"fixed,prefill_token,decode_seq,attention_kpair\" in ms, instead of the one learned from measured steps"},
    {"INFLIGHT_DEBUG_ENGINE_FAULT_AT_STEP", "serve",
     "Test hook, not for production: engine step number N (1-based) fails, which stops the engine"},
};

// Text for a table cell: `|` would end the cell, and `<key>` would read as an HTML tag.
std::string cell(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '|' || c == '<') out += '\\';
    out += c;
  }
  return out;
}

std::string code(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += '\\';  // in a table, a code span still ends the cell at a bare `|`
    out += c;
  }
  return "`" + out + "`";
}

std::string flag_names(const CLI::Option& opt) {
  std::string names;
  for (const std::string& n : opt.get_lnames()) names += (names.empty() ? "" : ", ") + code("--" + n);
  for (const std::string& n : opt.get_snames()) names += (names.empty() ? "" : ", ") + code("-" + n);
  return names.empty() ? code(opt.get_name(true)) : names;  // a positional has neither
}

bool takes_no_value(const CLI::Option& opt) { return opt.get_expected_max() == 0; }  // an on/off flag

// The value a flag takes, as --help writes it (TEXT, INT, UINT, FLOAT), with the values a validator allows.
std::string value_of(const CLI::Option& opt) {
  if (takes_no_value(opt)) return "";
  const std::string full = opt.get_type_name();  // TYPE, then ":" and each validator's description
  const size_t colon = full.find(':');
  std::string value = code(full.substr(0, colon));
  if (colon != std::string::npos) value += " " + code(full.substr(colon + 1));
  if (opt.get_expected_max() >= CLI::detail::expected_max_vector_size) value += " ...";
  if (opt.get_required()) value += " (required)";
  return value;
}

std::string default_of(const CLI::Option& opt) {
  if (!opt.get_default_str().empty()) return code(opt.get_default_str());
  return takes_no_value(opt) ? "off" : "";
}

void print_flags(std::ostream& out, const CLI::App& cmd) {
  out << "| flag | value | default | description |\n|---|---|---|---|\n";
  for (const CLI::Option* opt : cmd.get_options({})) {
    if (opt == cmd.get_help_ptr() || opt == cmd.get_help_all_ptr()) continue;
    out << "| " << flag_names(*opt) << " | " << value_of(*opt) << " | " << default_of(*opt) << " | "
        << cell(opt->get_description()) << " |\n";
  }
}

void print_config_keys(std::ostream& out, const CLI::App& serve) {
  out << "\n### Config file\n\n"
         "`--config FILE` reads a JSON object of these keys (configs/server.json holds every one at its default). "
         "A key left out keeps its default, an unknown key or a value of the wrong type is an error, and a flag "
         "given on the command line overrides the file.\n\n"
         "| key | default | flag | description |\n|---|---|---|---|\n";
  const nlohmann::json defaults = server::to_json(server::ServerConfig{});
  for (const auto& [key, flag] : serve_config_key_flags()) {
    std::string description;
    if (!flag.empty()) {
      description = serve.get_option(flag)->get_description();
    } else {
      const auto it = config_only_settings().find(key);
      if (it == config_only_settings().end())
        throw std::logic_error("the serve setting " + key + " has no flag and no description in cli/config_docs.cpp");
      description = it->second;
    }
    out << "| " << code(key) << " | " << code(defaults[key].dump()) << " | "
        << (flag.empty() ? "(config file only)" : code(flag)) << " | " << cell(description) << " |\n";
  }
}

void print_docs(std::ostream& out, const CLI::App& app, const CLI::App* self) {
  out << "# Configuration reference\n\n"
         "Generated by `inflight config-docs` from the command-line definitions in cli/*.cpp: do not edit it by "
         "hand, change the flags and run `scripts/gen-config-docs.sh [build-dir]` (which runs "
         "`build/inflight config-docs > docs/CONFIGURATION.md`). test_cli fails while this file differs from "
         "what the command prints.\n\n"
         "Every command also takes `-h`, `--help`, which lists the same flags. A value is `TEXT` (a string), "
         "`INT`, `UINT` (not negative) or `FLOAT`; a flag without a value is off unless given.\n";
  for (const CLI::App* cmd : app.get_subcommands({})) {
    if (cmd == self) continue;
    out << "\n## inflight " << cmd->get_name() << "\n\n" << cell(cmd->get_description());
    if (cmd->get_group().empty()) out << "; not listed by `inflight --help`";
    out << "\n\n";
    print_flags(out, *cmd);
    if (cmd->get_name() == "serve") print_config_keys(out, *cmd);
  }
  out << "\n## Environment variables\n\n"
         "| variable | read by | meaning |\n|---|---|---|\n";
  for (const EnvVar& v : kEnvVars)
    out << "| " << code(v.name) << " | " << v.read_by << " | " << cell(v.meaning) << " |\n";
  out << "\nThe container images' entrypoint (docker/entrypoint.sh) also reads `INFLIGHT_<FLAG>` variables, one "
         "per `inflight serve` flag (`INFLIGHT_PORT` for `--port`), and passes them on as flags.\n";
}

}  // namespace

void add_config_docs_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("config-docs", "Print docs/CONFIGURATION.md: every command's flags (Markdown)");
  cmd->group("");  // hidden from --help: it serves the repository, not users
  cmd->callback([cmd] {
    std::ostringstream out;  // whole, so that a failing generator prints nothing
    print_docs(out, *cmd->get_parent(), cmd);
    std::cout << out.str();
  });
}

}  // namespace inflight::cli

// The subcommands of the `inflight` executable. Each registers its flags on the app and runs when chosen.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

namespace inflight::cli {

void add_generate_command(CLI::App& app);
void add_make_model_command(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_render_template_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);  // hidden: tests and debugging
// Hidden: prints docs/CONFIGURATION.md, the reference of every other command of `app`.
void add_config_docs_command(CLI::App& app);

// The keys of `inflight serve`'s config file, in to_json order, each with the flag that overrides it ("" for a
// key only the file sets). Found by running each flag's override, so it cannot disagree with what serve does.
std::vector<std::pair<std::string, std::string>> serve_config_key_flags();

}  // namespace inflight::cli

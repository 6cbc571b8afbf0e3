// The subcommands of the `inflight` executable. Each registers its flags on the app and runs when chosen.
#pragma once
#include <CLI/CLI.hpp>

namespace inflight::cli {

void add_generate_command(CLI::App& app);
void add_make_model_command(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_render_template_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);  // hidden: tests and debugging

}  // namespace inflight::cli

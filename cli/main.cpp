// inflight: an LLM decoding server. `inflight <command> --help` lists each command's flags.
#include <cstdio>
#include <exception>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "cli/commands.h"

int main(int argc, char** argv) {
  // Logs go to stderr; stdout carries only what a command produces (generated text).
  spdlog::set_default_logger(spdlog::stderr_color_mt("inflight"));
  CLI::App app{"inflight: an LLM decoding server for Llama-family models"};
  app.require_subcommand(1);
  inflight::cli::add_generate_command(app);
  inflight::cli::add_make_model_command(app);
  inflight::cli::add_serve_command(app);
  inflight::cli::add_bench_command(app);
  inflight::cli::add_render_template_command(app);
  inflight::cli::add_tokenize_command(app);
  inflight::cli::add_config_docs_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "inflight: error: %s\n", e.what());
    return 1;
  }
  return 0;
}

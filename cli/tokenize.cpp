// `inflight tokenize` (hidden, for tests and debugging): runs a model's tokenizer over lines of JSON on
// stdin, one answer line per request on stdout:
//   {"text": "...", "add_special_tokens": true}  ->  {"ids": [...], "text": decode(ids)}
//   {"ids": [...]}                               ->  {"text": decode(ids)}
// A bad line gets {"error": "..."} and the next line is read.
#include <iostream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "engine/model_loader.h"

namespace inflight::cli {

namespace {

nlohmann::json answer(const engine::Tokenizer& tok, const std::string& line) {
  using nlohmann::json;
  const json req = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!req.is_object()) return {{"error", "each line must be a JSON object"}};
  if (req.contains("text") && req["text"].is_string()) {
    const bool add_special = req.value("add_special_tokens", tok.add_bos());
    const std::vector<int32_t> ids = tok.encode(req["text"].get<std::string>(), add_special);
    return {{"ids", ids}, {"text", tok.decode(ids)}};
  }
  if (req.contains("ids") && req["ids"].is_array()) {
    std::vector<int32_t> ids;
    for (const json& v : req["ids"]) {
      if (!v.is_number_integer()) return {{"error", "ids must be integers"}};
      ids.push_back(v.get<int32_t>());
    }
    return {{"text", tok.decode(ids)}};
  }
  return {{"error", "a line needs \"text\" (a string) or \"ids\" (a list of token ids)"}};
}

void run_tokenize(const std::string& path) {
  const engine::Tokenizer tok = path.empty() ? engine::load_builtin_model().tokenizer : engine::load_tokenizer(path);
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    nlohmann::json out;
    try {
      out = answer(tok, line);
    } catch (const std::exception& e) {
      out = {{"error", e.what()}};
    }
    std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n' << std::flush;
  }
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Tokenize lines of JSON from stdin (tests, debugging)");
  cmd->group("");  // hidden from --help
  cmd->add_option("--tokenizer,-m", *path,
                  "Hugging Face folder, tokenizer.json, tokenizer.model or .gguf (default: the built-in model)");
  cmd->callback([path] { run_tokenize(*path); });
}

}  // namespace inflight::cli

// The `inflight` executable as a user runs it: generate with no arguments, make-model, bad flags.
#include <doctest/doctest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <vector>

#include "engine/model.h"
#include "engine/model_loader.h"
#include "test_support.h"

namespace {
using inflight::test::CommandResult;
CommandResult run(const std::string& args, bool stdout_only = false) {
  return inflight::test::run_inflight(args, stdout_only);
}

const std::filesystem::path kConfigDocs = std::filesystem::path(INFLIGHT_SOURCE_DIR) / "docs" / "CONFIGURATION.md";

std::string read_text(const std::filesystem::path& path) {
  const std::vector<uint8_t> bytes = inflight::test::read_bytes(path);
  return std::string(bytes.begin(), bytes.end());
}

// A CONFIGURATION.md's sections: "serve" for "## inflight serve", "Environment variables", each to the next
// "## " heading.
std::map<std::string, std::string> doc_sections(const std::string& text) {
  std::map<std::string, std::string> sections;
  std::istringstream in(text);
  std::string line;
  std::string* current = nullptr;
  while (std::getline(in, line)) {
    if (line.rfind("## ", 0) == 0) {
      const std::string title = line.substr(3);
      current = &sections[title.rfind("inflight ", 0) == 0 ? title.substr(9) : title];
    } else if (current != nullptr) {
      *current += line + "\n";
    }
  }
  return sections;
}

// The names in the first column of a section's table rows: "| `--model`, `-m` | ..." -> --model, -m.
std::set<std::string> documented_names(const std::string& section) {
  std::set<std::string> names;
  std::istringstream in(section);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("| `", 0) != 0) continue;
    const std::string first = line.substr(0, line.find(" | ", 2));
    for (size_t open = first.find('`'); open != std::string::npos; open = first.find('`', open)) {
      const size_t close = first.find('`', open + 1);
      if (close == std::string::npos) break;
      names.insert(first.substr(open + 1, close - open - 1));
      open = close + 1;
    }
  }
  return names;
}
std::set<std::string> documented_names(const std::map<std::string, std::string>& sections, const std::string& title) {
  const auto it = sections.find(title);
  return it == sections.end() ? std::set<std::string>() : documented_names(it->second);
}

// The flags `inflight <command> --help` lists (CLI11 indents each option's line by two spaces and a wrapped
// description further), but -h and --help, which every command has.
std::vector<std::string> help_flags(const std::string& help) {
  std::vector<std::string> flags;
  std::istringstream in(help);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("  -", 0) != 0) continue;
    std::istringstream names(line.substr(2, line.find(' ', 2) - 2));
    std::string name;
    while (std::getline(names, name, ','))
      if (name != "-h" && name != "--help") flags.push_back(name);
  }
  return flags;
}

// The commands `inflight --help` lists, after its "Subcommands:" line.
std::vector<std::string> help_commands(const std::string& help) {
  std::vector<std::string> commands;
  std::istringstream in(help);
  std::string line;
  bool listing = false;
  while (std::getline(in, line)) {
    if (line.rfind("Subcommands:", 0) == 0) listing = true;
    else if (listing && line.rfind("  ", 0) == 0 && line.size() > 2 && line[2] != ' ')
      commands.push_back(line.substr(2, line.find(' ', 2) - 2));
  }
  return commands;
}

// Why `doc` differs from what `inflight config-docs` prints ("" where it is the same, byte for byte): the
// flags and variables missing from it, or else the first line that differs.
std::string config_docs_out_of_date(const std::filesystem::path& doc) {
  const CommandResult generated = run("config-docs", true);
  if (generated.status != 0) return "`inflight config-docs` failed with status " + std::to_string(generated.status);
  const std::string committed = read_text(doc);
  if (committed == generated.output) return "";
  std::string why = doc.string() + " is not what `inflight config-docs` prints; regenerate it with "
                    "scripts/gen-config-docs.sh [build-dir].";
  const std::map<std::string, std::string> have = doc_sections(committed);
  std::string missing;
  for (const auto& [title, text] : doc_sections(generated.output)) {
    const std::set<std::string> documented = documented_names(have, title);
    for (const std::string& name : documented_names(text))
      if (!documented.count(name)) missing += " " + title + ": " + name + ";";
  }
  if (!missing.empty()) return why + " Missing from it:" + missing;
  std::istringstream a(committed), b(generated.output);
  std::string line_a, line_b;
  for (int n = 1;; ++n) {
    const bool more_a = bool(std::getline(a, line_a)), more_b = bool(std::getline(b, line_b));
    if (!more_a && !more_b) return why + " (they differ in the last newline)";
    if (!more_a || !more_b || line_a != line_b)
      return why + " First difference, line " + std::to_string(n) + ":\n  file:      " +
             (more_a ? line_a : "(end)") + "\n  generated: " + (more_b ? line_b : "(end)");
  }
}

// Independent of the generator: the flags each command's --help lists that `doc` does not have in that
// command's section, the commands --help lists without a section, and the environment variables the sources
// read (std::getenv) that its "Environment variables" section lacks. "" where nothing is missing.
std::string missing_from_config_docs(const std::filesystem::path& doc) {
  const std::map<std::string, std::string> sections = doc_sections(read_text(doc));
  std::set<std::string> commands;
  for (const auto& [title, text] : sections)
    if (title != "Environment variables") commands.insert(title);
  std::string missing;
  for (const std::string& command : help_commands(run("--help", true).output)) {
    if (!sections.count(command)) missing += " no section ## inflight " + command + ";";
    commands.insert(command);
  }
  for (const std::string& command : commands) {
    const CommandResult help = run(command + " --help", true);
    if (help.status != 0) {
      missing += " `inflight " + command + " --help` failed;";
      continue;
    }
    const std::set<std::string> documented = documented_names(sections, command);
    for (const std::string& flag : help_flags(help.output))
      if (!documented.count(flag)) missing += " " + command + ": " + flag + ";";
  }
  const std::set<std::string> variables = documented_names(sections, "Environment variables");
  for (const char* folder : {"cli", "server", "engine", "cache", "kernels", "client"}) {
    for (const auto& entry :
         std::filesystem::recursive_directory_iterator(std::filesystem::path(INFLIGHT_SOURCE_DIR) / folder)) {
      const std::string ext = entry.path().extension().string();
      if (!entry.is_regular_file() || (ext != ".cpp" && ext != ".h" && ext != ".cu" && ext != ".cuh")) continue;
      const std::string source = read_text(entry.path());
      for (size_t at = source.find("getenv(\""); at != std::string::npos; at = source.find("getenv(\"", at + 1)) {
        const size_t begin = at + 8;
        const std::string name = source.substr(begin, source.find('"', begin) - begin);
        if (!variables.count(name)) missing += " environment variable " + name + " (" + entry.path().string() + ");";
      }
    }
  }
  return missing.empty() ? "" : doc.string() + " lacks:" + missing;
}
}  // namespace

TEST_SUITE("cli") {
  TEST_CASE("generate with no arguments runs the built-in stories260K model and writes English") {
    const CommandResult r = run("generate -n 16");
    CHECK(r.status == 0);
    CHECK(r.output.find("stories260K") != std::string::npos);
    CHECK(r.output.find("--model") != std::string::npos);
    CHECK(r.output.find("tok/s") != std::string::npos);
    // Greedy, the built-in model continues the prompt as run.c does with stories260K.
    const CommandResult g = run("generate -n 20 --temperature 0", true);
    CHECK(g.status == 0);
    CHECK(g.output.find("Once upon a time, there was a little girl named Lily.") != std::string::npos);
  }

  TEST_CASE("generate on stories260K greedy prints the golden continuation") {
    const CommandResult r = run("generate -m " + inflight::test::stories_gguf() +
                         " -p 'Once upon a time' -n 20 --temperature 0 --kv-block-size 4");
    CHECK(r.status == 0);
    CHECK(r.output.find("Once upon a time, there was a little girl named Lily.") != std::string::npos);
  }

  TEST_CASE("make-model writes a loadable GGUF for every weight dtype and shape override") {
    inflight::test::TempDir dir("cli");
    // tiny's hidden size 128 takes the 32-block types; the K-quants get a 256-wide shape (q4_k_m also runs
    // on 128, all fallbacks).
    for (const char* dtype : {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k_m", "q4_k", "q5_k",
                              "q6_k", "q5_k_m"}) {
      const std::string dtype_name = dtype;
      CAPTURE(dtype_name);
      const bool wide = dtype_name == "q4_k" || dtype_name == "q5_k" || dtype_name == "q6_k" || dtype_name == "q5_k_m";
      const std::string path = dir / (std::string("m-") + dtype + ".gguf");
      const CommandResult r = run(std::string("make-model --preset tiny --layers 2 --vocab 300 --dtype ") + dtype +
                                  (wide ? " --dim 256 --ffn 512" : "") + " -o " + path);
      REQUIRE(r.status == 0);
      const inflight::engine::LoadedModel m = inflight::engine::load_model(path);
      CHECK(m.weights.config.num_layers == 2);
      CHECK(m.weights.config.vocab_size == 300);
      CHECK(m.tokenizer.vocab_size() == 300);
      const CommandResult g = run("generate -m " + path + " -n 8 --seed 3", true);
      CHECK(g.status == 0);
      CHECK(g.output.size() > std::string("Once upon a time").size());
      CHECK(run("generate -m " + path + " -n 8 --seed 3", true).output == g.output);  // same seed, same text
    }
  }

  TEST_CASE("make-model writes each architecture's small preset, and generate runs it") {
    inflight::test::TempDir dir("cli");
    for (const std::string preset : {"llama3-small", "qwen2-small", "qwen3-small", "mistral-small"}) {
      CAPTURE(preset);
      const std::string path = dir / (preset + ".gguf");
      const CommandResult r = run("make-model --preset " + preset + " --dtype q8_0 -o " + path);
      REQUIRE(r.status == 0);
      const std::string arch = preset.substr(0, preset.find('-'));
      CHECK(r.output.find("(" + (arch == "llama3" ? std::string("llama") : arch) + ")") != std::string::npos);
      CHECK(inflight::engine::load_model(path).weights.config.architecture == (arch == "llama3" ? "llama" : arch));
      const CommandResult g = run("generate -m " + path + " -n 24 --temperature 0", true);
      CHECK(g.status == 0);
    }
  }

  TEST_CASE("tokenize (the test command) answers each JSON line, a bad line with an error") {
    inflight::test::TempDir dir("cli");
    std::ofstream(dir / "in.jsonl") << "{\"text\": \"Once upon a time\", \"add_special_tokens\": true}\n"
                                    << "not json\n"
                                    << "{\"ids\": [1, 403, 407, 261, 378]}\n"
                                    << "{\"ids\": [9999]}\n";
    const CommandResult r = run("tokenize --tokenizer " + inflight::test::stories_gguf() + " < " + (dir / "in.jsonl"), true);
    CHECK(r.status == 0);
    CHECK(r.output == "{\"ids\":[1,403,407,261,378],\"text\":\"Once upon a time\"}\n"
                      "{\"error\":\"each line must be a JSON object\"}\n"
                      "{\"text\":\"Once upon a time\"}\n"
                      "{\"error\":\"token id 9999 is outside the vocabulary [0, 512)\"}\n");
    CHECK(run("tokenize --tokenizer /nonexistent.gguf < /dev/null").status == 1);
  }

  TEST_CASE("bad flags and bad files are clear errors, not crashes") {
    CommandResult r = run("generate --kv-block-size 3");
    CHECK(r.status == 1);
    CHECK(r.output.find("power of two") != std::string::npos);
    r = run("generate --kv-cache-dtype f7");
    CHECK(r.status == 1);
    CHECK(r.output.find("f7") != std::string::npos);
    r = run("generate -m /nonexistent/model.gguf");
    CHECK(r.status == 1);
    CHECK(r.output.find("/nonexistent/model.gguf") != std::string::npos);
    r = run("make-model --preset nope");
    CHECK(r.status == 1);
    CHECK(r.output.find("nope") != std::string::npos);
    r = run("make-model --format hf");
    CHECK(r.status == 1);
    CHECK(r.output.find("--tokenizer") != std::string::npos);
    r = run("make-model --tokenizer /nonexistent/tok");
    CHECK(r.status == 1);
    CHECK(r.output.find("/nonexistent/tok") != std::string::npos);
    r = run("make-model --dtype q4_k");  // tiny: hidden size 128
    CHECK(r.status == 1);
    CHECK(r.output.find("token_embd.weight has 128 columns, not a multiple of the q4_k block size 256") != std::string::npos);
    r = run("make-model --dtype q3_k");
    CHECK(r.status == 1);
    CHECK(r.output.find("q3_k") != std::string::npos);
    r = run("make-model --format onnx");
    CHECK(r.status == 1);
    CHECK(r.output.find("onnx") != std::string::npos);
    r = run("generate --top-p 0");
    CHECK(r.status == 1);
    CHECK(r.output.find("top_p") != std::string::npos);
    r = run("generate --device gpu");
    CHECK(r.status == 1);
    CHECK(r.output.find("unknown device 'gpu' (auto, cpu, cuda)") != std::string::npos);
  }

  TEST_CASE("--device: cpu runs on the CPU, auto says what it chose, cuda without a GPU is a clear error") {
    CommandResult r = run("generate -n 4 --temperature 0 --device cpu");
    CHECK(r.status == 0);
    CHECK(r.output.find("device: cpu (asked for)") != std::string::npos);
    if (inflight::engine::gpu_memory().total > 0) return;  // a GPU machine: the cuda tests cover the rest
    r = run("generate -n 4 --temperature 0 --device auto");
    CHECK(r.status == 0);
    CHECK(r.output.find("device: cpu (auto: ") != std::string::npos);
    for (const char* cmd : {"generate -n 4 --device cuda", "serve --port 0 --device cuda"}) {
      CAPTURE(cmd);
      r = run(cmd);
      CHECK(r.status == 1);
      CHECK(r.output.find("--device cuda: ") != std::string::npos);
    }
  }

  TEST_CASE("docs/CONFIGURATION.md is what `inflight config-docs` prints") {
    const std::string why = config_docs_out_of_date(kConfigDocs);
    INFO(why);
    CHECK(why.empty());
  }

  TEST_CASE("docs/CONFIGURATION.md has every flag of each command's --help and every variable the code reads") {
    const std::string why = missing_from_config_docs(kConfigDocs);
    INFO(why);
    CHECK(why.empty());
  }

  TEST_CASE("the config docs checks name a flag row or a variable row taken out of the file") {
    inflight::test::TempDir dir("cli");
    const std::string text = read_text(kConfigDocs);
    auto without = [&](const std::string& row_start, const std::string& name) {
      const size_t at = text.find(row_start);
      REQUIRE(at != std::string::npos);
      std::ofstream(dir / name, std::ios::binary) << text.substr(0, at) + text.substr(text.find('\n', at) + 1);
      return std::filesystem::path(dir / name);
    };
    const std::filesystem::path no_flag = without("| `--max-queue` |", "no-flag.md");
    CHECK(config_docs_out_of_date(no_flag).find("serve: --max-queue;") != std::string::npos);
    CHECK(missing_from_config_docs(no_flag).find("serve: --max-queue;") != std::string::npos);
    const std::filesystem::path no_short = without("| `--threads`, `-t` |", "no-short.md");  // generate's, the first
    CHECK(missing_from_config_docs(no_short).find("generate: -t;") != std::string::npos);
    const std::filesystem::path no_variable = without("| `INFLIGHT_ISA` |", "no-variable.md");
    CHECK(config_docs_out_of_date(no_variable).find("Environment variables: INFLIGHT_ISA;") != std::string::npos);
    CHECK(missing_from_config_docs(no_variable).find("environment variable INFLIGHT_ISA") != std::string::npos);
    std::ofstream(dir / "longer.md", std::ios::binary) << text + "\n";
    CHECK(config_docs_out_of_date(dir / "longer.md").find("First difference") != std::string::npos);
  }
}

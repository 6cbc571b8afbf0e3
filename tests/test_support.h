// Helpers shared by the tests: where the reference data lives, scratch folders, file bytes.
#pragma once
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <sys/wait.h>

namespace inflight::test {

// The tests' reference data (tests/data, whose README says where each file came from): $INFLIGHT_TEST_DATA,
// else the source tree's folder.
inline std::filesystem::path data_dir() {
  if (const char* env = std::getenv("INFLIGHT_TEST_DATA")) return env;
  return INFLIGHT_TEST_DATA;
}
// `relative` under data_dir(); a path that does not exist throws, naming it, so the test case using it fails
// with that name.
inline std::filesystem::path data_path(const std::filesystem::path& relative) {
  const std::filesystem::path path = data_dir() / relative;
  if (!std::filesystem::exists(path)) throw std::runtime_error("missing test data: " + path.string());
  return path;
}
// The `inflight` executable under test: $INFLIGHT_BINARY_PATH, else the build's own (where the test binaries
// run from a copy, as scripts/device-check.sh runs them on a GPU machine).
inline std::string inflight_binary() {
  if (const char* env = std::getenv("INFLIGHT_BINARY_PATH")) return env;
  return INFLIGHT_BINARY;
}
// The device the servers under test run their model on: $INFLIGHT_TEST_DEVICE (ctest server_cuda: cuda), else
// cpu.
inline std::string test_device() {
  const char* env = std::getenv("INFLIGHT_TEST_DEVICE");
  return env != nullptr ? env : "cpu";
}
inline std::filesystem::path stories_dir() { return data_path("models/stories260K"); }
inline std::string stories_gguf() { return data_path("models/stories260K/stories260K.gguf").string(); }
inline std::string stories_hf() { return data_path("models/stories260K/hf").string(); }

// A fresh empty folder under the system temp dir, removed at scope exit.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag) {
    std::random_device rd;
    path = std::filesystem::temp_directory_path() / ("inflight-" + tag + "-" + std::to_string(rd()));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

// The bytes of file `p`; a file that cannot be opened throws, naming it.
inline std::vector<uint8_t> read_bytes(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + p.string());
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}
inline void write_bytes(const std::filesystem::path& p, const std::vector<uint8_t>& bytes) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

struct CommandResult {
  int status = -1;     // exit status; -1 when the command could not run or was killed
  std::string output;  // stdout, and stderr unless stdout_only
};

// Runs the `inflight` executable under test with `args` (shell syntax) and waits for it.
inline CommandResult run_inflight(const std::string& args, bool stdout_only = false) {
  const std::string cmd = inflight_binary() + " " + args + (stdout_only ? " 2>/dev/null" : " 2>&1");
  CommandResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

}  // namespace inflight::test

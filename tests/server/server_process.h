// `inflight serve` as a child process on an ephemeral port: started with flags, its log in a file, its
// port read from the "listening on" line, stopped with a signal.
#pragma once
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <optional>
#include <regex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "http_test_client.h"
#include "test_support.h"

namespace inflight::test {

class ServerProcess {
 public:
  // Starts `inflight serve --port 0 --host 127.0.0.1 <args>`; returns once it listens (not yet ready).
  // `env` entries are "NAME=value".
  explicit ServerProcess(const std::vector<std::string>& args, const std::vector<std::string>& env = {})
      : dir_("serve") {
    log_path_ = dir_ / "server.log";
    std::vector<std::string> argv = {inflight_binary(), "serve", "--host", "127.0.0.1", "--port", "0"};
    argv.insert(argv.end(), args.begin(), args.end());
    // The model on the CPU, also where a GPU is present, unless the test or INFLIGHT_TEST_DEVICE says otherwise.
    if (std::find(args.begin(), args.end(), "--device") == args.end()) argv.insert(argv.end(), {"--device", test_device()});
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      FILE* log = std::fopen(log_path_.c_str(), "w");
      if (log != nullptr) {
        dup2(fileno(log), 1);
        dup2(fileno(log), 2);
      }
      for (const std::string& e : env) putenv(const_cast<char*>(e.c_str()));
      std::vector<char*> cargv;
      for (std::string& a : argv) cargv.push_back(a.data());
      cargv.push_back(nullptr);
      execv(cargv[0], cargv.data());
      _exit(127);
    }
    const std::regex listening(R"(listening on http://127\.0\.0\.1:(\d+))");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      std::smatch m;
      const std::string text = log();
      if (std::regex_search(text, m, listening)) {
        port_ = uint16_t(std::stoi(m[1]));
        return;
      }
      if (exited()) throw std::runtime_error("inflight serve exited at start-up:\n" + text);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    throw std::runtime_error("inflight serve did not start listening:\n" + log());
  }
  ~ServerProcess() {
    if (!status_) {
      ::kill(pid_, SIGKILL);
      int st;
      waitpid(pid_, &st, 0);
    }
  }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  uint16_t port() const { return port_; }
  std::string log() const {
    std::ifstream in(log_path_);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }

  // Polls /health until 200; false after `timeout_s`.
  bool wait_ready(double timeout_s = 60) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(timeout_s * 1000));
    while (std::chrono::steady_clock::now() < deadline) {
      try {
        if (http_request(port_, "GET", "/health").status == 200) return true;
      } catch (const std::exception&) {  // not accepting (it may have exited)
      }
      if (exited()) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  void signal(int signo) { ::kill(pid_, signo); }

  // The exit code once the process ended within `timeout_s` (-1: killed by a signal), else nullopt.
  std::optional<int> wait_exit(double timeout_s) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(timeout_s * 1000));
    while (!exited()) {
      if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return WIFEXITED(*status_) ? WEXITSTATUS(*status_) : -1;
  }

 private:
  bool exited() {
    if (status_) return true;
    int st;
    if (waitpid(pid_, &st, WNOHANG) == pid_) status_ = st;
    return status_.has_value();
  }

  TempDir dir_;
  std::string log_path_;
  pid_t pid_ = -1;
  uint16_t port_ = 0;
  std::optional<int> status_;
};

}  // namespace inflight::test

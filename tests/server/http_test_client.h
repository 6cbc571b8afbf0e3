// A small blocking HTTP/1.1 client over raw POSIX sockets, for end-to-end tests: whole requests,
// hand-made malformed ones, chunked and SSE bodies, and hanging up mid-response.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace inflight::test {

struct HttpResult {
  int status = 0;                              // 0: no response (connection closed first)
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;                            // de-chunked

  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? std::string() : it->second;
  }
};

// A connected socket, closed on destruction. Reads time out after `timeout_s` (then they fail).
class Connection {
 public:
  // `receive_buffer_bytes` > 0: a small SO_RCVBUF, so that a client that does not read holds the server's
  // writes back after a few KB.
  explicit Connection(uint16_t port, double timeout_s = 60, int receive_buffer_bytes = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) throw std::runtime_error("socket() failed");
    if (receive_buffer_bytes > 0)
      setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &receive_buffer_bytes, sizeof receive_buffer_bytes);
    timeval tv{static_cast<time_t>(timeout_s), static_cast<suseconds_t>((timeout_s - double(time_t(timeout_s))) * 1e6)};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(fd_);
      throw std::runtime_error("connect() to port " + std::to_string(port) + " failed");
    }
  }
  ~Connection() { close(); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  // Half-close: the server sees end of stream, the connection can still be read.
  void shutdown_write() { ::shutdown(fd_, SHUT_WR); }

  // False when the peer is gone.
  bool send_all(std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(size_t(n));
    }
    return true;
  }

  // Up to `max` bytes; "" at end of stream or on a timeout/error.
  std::string recv_some(size_t max = 65536) {
    std::string buf(max, '\0');
    const ssize_t n = ::recv(fd_, buf.data(), buf.size(), 0);
    if (n <= 0) return {};
    buf.resize(size_t(n));
    return buf;
  }

  // Whether the server closed the connection within `timeout_ms` (reads and discards what arrives).
  bool closed_by_peer_within(int timeout_ms) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) > 0) {
        char buf[4096];
        const ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) return true;
      }
    }
    return false;
  }

  // Reads one response: status line, headers, body by Content-Length, chunked, or to end of stream.
  HttpResult read_response() {
    HttpResult r;
    size_t header_end;
    while ((header_end = pending_.find("\r\n\r\n")) == std::string::npos) {
      const std::string more = recv_some();
      if (more.empty()) return r;
      pending_ += more;
    }
    const std::string head = pending_.substr(0, header_end);
    pending_.erase(0, header_end + 4);
    size_t line_end = head.find("\r\n");
    const std::string status_line = head.substr(0, line_end);
    if (status_line.size() >= 12) r.status = std::stoi(status_line.substr(9, 3));
    while (line_end != std::string::npos) {
      const size_t next = head.find("\r\n", line_end + 2);
      const std::string line = head.substr(line_end + 2, next == std::string::npos ? std::string::npos : next - line_end - 2);
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        std::string name = line.substr(0, colon);
        for (char& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
        std::string value = line.substr(colon + 1);
        while (!value.empty() && value.front() == ' ') value.erase(0, 1);
        r.headers[name] = value;
      }
      line_end = next;
    }
    if (r.status == 100) return read_response();
    if (r.header("transfer-encoding") == "chunked") {
      while (true) {
        const std::string size_line = read_line();
        const size_t size = std::stoul(size_line, nullptr, 16);
        if (size == 0) {
          read_line();
          break;
        }
        r.body += read_exact(size);
        read_line();
      }
    } else if (!r.header("content-length").empty()) {
      r.body = read_exact(std::stoul(r.header("content-length")));
    } else {
      r.body = pending_;
      pending_.clear();
      for (std::string more; !(more = recv_some()).empty();) r.body += more;
    }
    return r;
  }

 private:
  std::string read_exact(size_t n) {
    while (pending_.size() < n) {
      const std::string more = recv_some();
      if (more.empty()) throw std::runtime_error("connection closed mid-body");
      pending_ += more;
    }
    std::string out = pending_.substr(0, n);
    pending_.erase(0, n);
    return out;
  }
  std::string read_line() {
    size_t end;
    while ((end = pending_.find("\r\n")) == std::string::npos) {
      const std::string more = recv_some();
      if (more.empty()) throw std::runtime_error("connection closed mid-line");
      pending_ += more;
    }
    std::string line = pending_.substr(0, end);
    pending_.erase(0, end + 2);
    return line;
  }

  int fd_ = -1;
  std::string pending_;
};

inline std::string format_request(const std::string& method, const std::string& target, const std::string& body,
                                  const std::string& extra_headers = {}) {
  std::string req = method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + extra_headers;
  if (!body.empty() || method == "POST")
    req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  return req + "\r\n" + body;
}

inline HttpResult http_request(uint16_t port, const std::string& method, const std::string& target,
                               const std::string& body = {}, const std::string& extra_headers = {}) {
  Connection c(port);
  if (!c.send_all(format_request(method, target, body, extra_headers))) return {};
  return c.read_response();
}

// The `data:` payloads of an SSE body, in order.
inline std::vector<std::string> sse_events(const std::string& body) {
  std::vector<std::string> events;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) end = body.size();
    std::string_view frame(body.data() + pos, end - pos);
    if (frame.rfind("data: ", 0) == 0) events.emplace_back(frame.substr(6));
    pos = end + 2;
  }
  return events;
}

}  // namespace inflight::test

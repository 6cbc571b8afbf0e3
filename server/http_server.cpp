#include "server/http_server.h"

#include <sys/socket.h>

#include <cerrno>

#include <chrono>
#include <cstdio>
#include <functional>
#include <optional>
#include <sstream>
#include <stdexcept>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <spdlog/spdlog.h>

#include "server/api_error.h"
#include "server/response_channel.h"

namespace inflight::server {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

std::chrono::milliseconds seconds(double s) { return std::chrono::milliseconds(int64_t(s * 1000.0)); }

constexpr auto kDrainTimeout = std::chrono::seconds(3);  // reading what a refused client still sends
// Connections over the limit being answered at once; beyond it they are closed without an answer, so
// that a flood cannot hold more descriptors than max_connections + this.
constexpr int kMaxRefusing = 64;
constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";

}  // namespace

// One connection. States: reading a request -> an exchange (the router answers, maybe later, maybe
// as a stream) -> reading the next request, or closing. Every member is touched only on the strand.
class HttpSession : public ResponseChannel, public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(tcp::socket&& socket, ServerState& state, Router& router, std::shared_ptr<ConnectionRegistry> registry)
      : stream_(std::move(socket)), state_(state), config_(state.config()), router_(router), registry_(std::move(registry)) {
    registry_->num_open++;
  }
  ~HttpSession() override { registry_->num_open--; }

  void start() {
    net::dispatch(stream_.get_executor(), beast::bind_front_handler(&HttpSession::do_read_header, shared_from_this()));
  }

  // Shutdown: close now if between requests, else once the current response is complete.
  void close_when_idle() {
    net::post(stream_.get_executor(), [self = shared_from_this()] {
      self->closing_ = true;
      if (!self->in_exchange_) self->do_close();
    });
  }

  // ResponseChannel
  net::any_io_executor executor() override { return stream_.get_executor(); }
  void send(HttpResponse response) override;
  void begin_events() override;
  void send_event(const std::string& data) override;
  void end_events() override;
  void watch_client(std::function<void()> on_gone) override;
  bool client_gone() const override { return gone_; }
  Clock::time_point received_at() const override { return received_at_; }

 private:
  void do_read_header();
  void on_read_header(beast::error_code ec, size_t);
  void do_read_body();
  void on_read_body(beast::error_code ec, size_t);
  void on_read_error(beast::error_code ec);
  void refuse(int status, const std::string& message);
  void on_write(beast::error_code ec, size_t);
  void flush_events();
  void on_events_written(beast::error_code ec, size_t);
  void end_exchange();
  void arm_watch();
  void on_watch(beast::error_code ec);
  void arm_watch_or_read();  // after a spurious wake-up
  void stop_watch();
  void mark_gone();
  void do_drain();
  void read_drain();
  void do_close();

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  ServerState& state_;
  const ServerConfig& config_;
  Router& router_;
  std::shared_ptr<ConnectionRegistry> registry_;

  // The current exchange.
  bool in_exchange_ = false;  // a request was read and its response is not complete
  bool keep_alive_ = true;
  unsigned version_ = 11;
  Clock::time_point received_at_;
  std::shared_ptr<HttpResponse> response_;  // being written
  bool drain_after_write_ = false;          // a refused request: read what is left, then close

  // Server-sent events: chunk-framed bytes (raw on HTTP/1.0), written one batch at a time.
  bool chunked_ = true;
  std::string outbox_;
  std::string writing_;
  bool write_pending_ = false;
  bool events_ended_ = false;

  // The client watch: a wait for readability while the request runs; readable, with a peek finding end
  // of stream, means the peer closed.
  std::function<void()> on_gone_;
  bool watch_wanted_ = false;      // until the response is complete
  bool watch_pending_ = false;
  bool read_after_watch_ = false;  // the next request is read once the cancelled watch completes
  bool gone_ = false;
  bool closing_ = false;           // server shutdown
  bool closed_ = false;
  std::vector<char> drain_buffer_;
};

void HttpSession::do_read_header() {
  if (closed_ || closing_) return do_close();
  parser_.emplace();
  parser_->body_limit(uint64_t(config_.max_body_bytes));
  parser_->header_limit(uint32_t(config_.max_header_bytes));
  // One deadline for the whole request, header and body (slow-loris clients) and for keep-alive idling.
  stream_.expires_after(seconds(config_.request_timeout_seconds));
  http::async_read_header(stream_, buffer_, *parser_,
                          beast::bind_front_handler(&HttpSession::on_read_header, shared_from_this()));
}

void HttpSession::on_read_header(beast::error_code ec, size_t) {
  if (ec) return on_read_error(ec);
  const auto& req = parser_->get();
  auto expect = req.find(http::field::expect);
  if (expect != req.end() && beast::iequals(expect->value(), "100-continue") && !parser_->is_done()) {
    net::async_write(stream_, net::buffer(kContinue, sizeof kContinue - 1),
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       if (ec) return self->on_read_error(ec);
                       self->do_read_body();
                     });
    return;
  }
  do_read_body();
}

void HttpSession::do_read_body() {
  if (parser_->is_done()) return on_read_body({}, 0);
  http::async_read(stream_, buffer_, *parser_, beast::bind_front_handler(&HttpSession::on_read_body, shared_from_this()));
}

void HttpSession::on_read_body(beast::error_code ec, size_t) {
  if (ec) return on_read_error(ec);
  in_exchange_ = true;
  received_at_ = Clock::now();
  HttpRequest request = parser_->release();
  keep_alive_ = request.keep_alive() && !closing_ && !state_.stopping();  // draining: one answer per connection
  version_ = request.version();
  stream_.expires_never();
  router_.handle(std::move(request), shared_from_this());
}

void HttpSession::on_read_error(beast::error_code ec) {
  if (closed_) return;
  if (ec == http::error::body_limit)
    return refuse(413, "the request body exceeds " + std::to_string(config_.max_body_bytes) + " bytes");
  if (ec == http::error::header_limit)
    return refuse(431, "the request header exceeds " + std::to_string(config_.max_header_bytes) + " bytes");
  // A clean close between requests, a timeout (the stream is already closed), a reset, or a request cut
  // short: nobody to answer.
  if (ec == http::error::end_of_stream || ec == beast::error::timeout || ec == net::error::operation_aborted ||
      ec == http::error::partial_message || ec == net::error::eof || ec == net::error::connection_reset ||
      ec == net::error::broken_pipe)
    return do_close();
  refuse(400, "malformed HTTP request: " + ec.message());
}

void HttpSession::refuse(int status, const std::string& message) {
  in_exchange_ = true;
  received_at_ = Clock::now();
  keep_alive_ = false;
  version_ = 11;
  drain_after_write_ = true;
  const char* code = status == 413 ? "body_too_large" : status == 431 ? "header_too_large" : "bad_http";
  spdlog::info("{} \"(refused: {})\" {}", state_.next_id("req"), message, status);
  send(json_response(status, error_json("invalid_request_error", message, {}, code), config_.retry_after_seconds));
}

void HttpSession::send(HttpResponse response) {
  if (closed_ || gone_) return;
  stop_watch();
  state_.metrics().count_http_response(response.result_int());
  response.version(version_);
  response.keep_alive(keep_alive_);
  response.set(http::field::server, "inflight");
  response.prepare_payload();
  response_ = std::make_shared<HttpResponse>(std::move(response));
  stream_.expires_after(seconds(config_.write_timeout_seconds));
  http::async_write(stream_, *response_, beast::bind_front_handler(&HttpSession::on_write, shared_from_this()));
}

void HttpSession::on_write(beast::error_code ec, size_t) {
  response_.reset();
  if (ec) {
    mark_gone();
    return do_close();
  }
  if (drain_after_write_) return do_drain();
  end_exchange();
}

void HttpSession::begin_events() {
  if (closed_ || gone_) return;
  state_.metrics().count_http_response(200);
  chunked_ = version_ >= 11;
  if (!chunked_) keep_alive_ = false;  // HTTP/1.0: the body ends when the connection does
  outbox_ = version_ >= 11 ? "HTTP/1.1 200 OK\r\n" : "HTTP/1.0 200 OK\r\n";
  outbox_ += "Server: inflight\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n";
  outbox_ += chunked_ ? "Transfer-Encoding: chunked\r\n" : "";
  outbox_ += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  events_ended_ = false;
  flush_events();
}

void HttpSession::send_event(const std::string& data) {
  if (closed_ || gone_ || events_ended_) return;
  const std::string frame = "data: " + data + "\n\n";
  if (chunked_) {
    char size[24];
    std::snprintf(size, sizeof size, "%zx\r\n", frame.size());
    outbox_ += size;
    outbox_ += frame;
    outbox_ += "\r\n";
  } else {
    outbox_ += frame;
  }
  flush_events();
}

void HttpSession::end_events() {
  if (closed_ || gone_ || events_ended_) return;
  if (chunked_) outbox_ += "0\r\n\r\n";
  events_ended_ = true;
  flush_events();
}

void HttpSession::flush_events() {
  if (write_pending_ || outbox_.empty()) return;
  writing_.swap(outbox_);
  outbox_.clear();
  write_pending_ = true;
  stream_.expires_after(seconds(config_.write_timeout_seconds));
  net::async_write(stream_, net::buffer(writing_), beast::bind_front_handler(&HttpSession::on_events_written, shared_from_this()));
}

void HttpSession::on_events_written(beast::error_code ec, size_t) {
  write_pending_ = false;
  writing_.clear();
  if (ec) {
    mark_gone();
    return do_close();
  }
  if (!outbox_.empty()) return flush_events();
  if (!events_ended_) return;
  stop_watch();
  end_exchange();
}

void HttpSession::end_exchange() {
  in_exchange_ = false;
  on_gone_ = nullptr;  // drops the job, which holds this session
  events_ended_ = false;
  if (!keep_alive_ || closing_) return do_close();
  if (watch_pending_) {
    read_after_watch_ = true;  // the cancelled wait completes first; reading now would race it
    return;
  }
  do_read_header();
}

void HttpSession::watch_client(std::function<void()> on_gone) {
  if (gone_) {
    net::post(stream_.get_executor(), std::move(on_gone));
    return;
  }
  on_gone_ = std::move(on_gone);
  // Bytes already buffered are a pipelined request, not a hang-up: nothing to watch for then.
  watch_wanted_ = buffer_.size() == 0;
  if (watch_wanted_) arm_watch();
}

void HttpSession::arm_watch() {
  if (watch_pending_ || closed_) return;
  watch_pending_ = true;
  stream_.socket().async_wait(tcp::socket::wait_read, beast::bind_front_handler(&HttpSession::on_watch, shared_from_this()));
}

void HttpSession::on_watch(beast::error_code ec) {
  watch_pending_ = false;
  if (in_exchange_ && !closed_ && ec != net::error::operation_aborted) {
    bool hung_up = bool(ec);
    if (!ec) {
      // Readable: the peer closed (0 bytes), sent more (a pipelined request: stop watching, keep it), or
      // nothing at all: epoll is edge-triggered, and an edge from bytes already read can arrive late.
      // NOTE: never a blocking read here; it would stall the strand, and with it this response.
      char byte;
      const ssize_t n = ::recv(stream_.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return arm_watch_or_read();
      hung_up = n <= 0;
    }
    if (hung_up) {
      mark_gone();
      return do_close();
    }
  }
  if (read_after_watch_) {
    read_after_watch_ = false;
    do_read_header();
  }
}

void HttpSession::arm_watch_or_read() {
  if (watch_wanted_) return arm_watch();
  if (read_after_watch_) {
    read_after_watch_ = false;
    do_read_header();
  }
}

void HttpSession::stop_watch() {
  watch_wanted_ = false;
  if (!watch_pending_) return;
  beast::error_code ec;
  stream_.socket().cancel(ec);  // NOTE: only called with no write in flight; cancel() stops every operation
}

void HttpSession::mark_gone() {
  if (gone_) return;
  gone_ = true;
  if (on_gone_) {
    auto fn = std::move(on_gone_);
    on_gone_ = nullptr;
    fn();
  }
}

void HttpSession::do_drain() {
  // The client may still be sending the body we refused; closing with unread data would reset the
  // connection and could destroy the answer before the client reads it.
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  if (ec) return do_close();
  drain_buffer_.resize(64 << 10);
  stream_.expires_after(kDrainTimeout);
  read_drain();
}

void HttpSession::read_drain() {
  stream_.async_read_some(net::buffer(drain_buffer_), [self = shared_from_this()](beast::error_code ec, size_t) {
    if (ec) return self->do_close();
    self->read_drain();
  });
}

void HttpSession::do_close() {
  if (closed_) return;
  closed_ = true;
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
  stream_.socket().close(ec);
}

HttpServer::HttpServer(net::io_context& ioc, ServerState& state, Router& router)
    : ioc_(ioc), state_(state), router_(router), acceptor_(net::make_strand(ioc)) {}

uint16_t HttpServer::listen(const std::string& host, uint16_t port) {
  tcp::resolver resolver(ioc_);
  beast::error_code ec;
  const auto endpoints = resolver.resolve(host, std::to_string(port), tcp::resolver::passive, ec);
  if (ec || endpoints.empty()) throw std::runtime_error("cannot resolve host " + host + ": " + ec.message());
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  auto fail = [&](const char* what) {
    throw std::runtime_error(std::string("cannot ") + what + " " + host + ":" + std::to_string(port) + ": " + ec.message());
  };
  acceptor_.open(endpoint.protocol(), ec);
  if (ec) fail("open");
  acceptor_.set_option(net::socket_base::reuse_address(true), ec);
  acceptor_.bind(endpoint, ec);
  if (ec) fail("bind");
  acceptor_.listen(net::socket_base::max_listen_connections, ec);
  if (ec) fail("listen on");
  const uint16_t bound = acceptor_.local_endpoint().port();
  net::dispatch(acceptor_.get_executor(), [this] { do_accept(); });
  return bound;
}

void HttpServer::stop() {
  net::post(acceptor_.get_executor(), [this] {
    beast::error_code ec;
    acceptor_.close(ec);
  });
  std::lock_guard<std::mutex> lock(registry_->mu);
  for (auto& weak : registry_->sessions)
    if (auto session = weak.lock()) session->close_when_idle();
}

void HttpServer::do_accept() {
  acceptor_.async_accept(net::make_strand(ioc_), beast::bind_front_handler(&HttpServer::on_accept, this));
}

void HttpServer::on_accept(beast::error_code ec, tcp::socket socket) {
  if (ec == net::error::operation_aborted || !acceptor_.is_open()) return;  // stopped
  if (!ec && registry_->num_open.load() >= state_.config().max_connections) {
    refuse_connection(std::move(socket));
  } else if (!ec) {
    auto session = std::make_shared<HttpSession>(std::move(socket), state_, router_, registry_);
    {
      std::lock_guard<std::mutex> lock(registry_->mu);
      auto& list = registry_->sessions;
      std::erase_if(list, [](const std::weak_ptr<HttpSession>& w) { return w.expired(); });
      list.push_back(session);
    }
    session->start();
  } else {
    spdlog::warn("accept failed: {}", ec.message());
  }
  do_accept();
}

namespace {

// A refused connection: the 503 is written, the sending side shut, and what the client still sends is
// read and dropped until it closes or kDrainTimeout passes (closing with unread bytes would reset the
// connection and could destroy the answer before the client reads it).
struct RefusedConnection : std::enable_shared_from_this<RefusedConnection> {
  RefusedConnection(tcp::socket&& socket, std::string bytes, std::shared_ptr<ConnectionRegistry> registry)
      : stream(std::move(socket)), response(std::move(bytes)), registry(std::move(registry)) {
    this->registry->num_refusing++;
  }
  ~RefusedConnection() { registry->num_refusing--; }

  void start() {
    stream.expires_after(kDrainTimeout);
    net::async_write(stream, net::buffer(response), [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->close();
      self->stream.socket().shutdown(tcp::socket::shutdown_send, ec);
      if (ec) return self->close();
      self->drain();
    });
  }
  void drain() {
    stream.async_read_some(net::buffer(scratch), [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->close();
      self->drain();
    });
  }
  void close() {
    beast::error_code ec;
    stream.socket().close(ec);
  }

  beast::tcp_stream stream;
  std::string response;
  std::shared_ptr<ConnectionRegistry> registry;
  char scratch[4096];
};

}  // namespace

void HttpServer::refuse_connection(tcp::socket socket) {
  state_.metrics().count_http_response(503);
  spdlog::debug("refused a connection: {} open (max_connections)", registry_->num_open.load());
  if (registry_->num_refusing.load() >= kMaxRefusing) {
    beast::error_code ec;
    socket.close(ec);
    return;
  }
  HttpResponse res = json_response(
      503,
      error_json("server_error",
                 "too many open connections (max_connections " + std::to_string(state_.config().max_connections) +
                     "); try again shortly",
                 {}, "too_many_connections"),
      state_.config().retry_after_seconds);
  res.set(http::field::server, "inflight");
  res.keep_alive(false);
  res.prepare_payload();
  std::ostringstream out;
  out << res;
  auto refused = std::make_shared<RefusedConnection>(std::move(socket), out.str(), registry_);
  refused->start();
}

}  // namespace inflight::server

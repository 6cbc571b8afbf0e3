// HttpServer: the listener and its connections, after Beast's advanced async server. Each connection is
// one HttpSession on its own strand: requests are read with a deadline and with header and body limits,
// answered through the Router, and written with a deadline; while a generation runs the session watches
// the socket, so a client that goes away cancels its request. Beyond max_connections open connections,
// a new one is answered 503 and closed.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "server/routes.h"
#include "server/server_state.h"

namespace inflight::server {

class HttpSession;

// The live connections; shared with the sessions so that it outlives the last of them.
struct ConnectionRegistry {
  std::atomic<int> num_open{0};
  std::atomic<int> num_refusing{0};  // connections over max_connections being answered 503 and closed
  std::mutex mu;
  std::vector<std::weak_ptr<HttpSession>> sessions;  // pruned as sessions come and go
};

class HttpServer {
 public:
  HttpServer(boost::asio::io_context& ioc, ServerState& state, Router& router);

  // Binds host:port (port 0: any free port) and starts accepting. Returns the bound port. Throws
  // std::runtime_error naming the address when binding fails.
  uint16_t listen(const std::string& host, uint16_t port);
  // Stops accepting and asks every connection to close as soon as it has no response in progress.
  // Thread-safe.
  void stop();
  int num_connections() const { return registry_->num_open.load(); }

 private:
  void do_accept();
  void on_accept(boost::system::error_code ec, boost::asio::ip::tcp::socket socket);
  // A connection over max_connections: 503, then closed.
  void refuse_connection(boost::asio::ip::tcp::socket socket);

  boost::asio::io_context& ioc_;
  ServerState& state_;
  Router& router_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::shared_ptr<ConnectionRegistry> registry_ = std::make_shared<ConnectionRegistry>();
};

}  // namespace inflight::server

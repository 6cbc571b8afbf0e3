// ResponseChannel: how a route answers its request; implemented by the HTTP session. Every call is made
// on executor() (the connection's strand), which is also where engine events are posted.
#pragma once
#include <chrono>
#include <functional>
#include <string>

#include <boost/asio/any_io_executor.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

namespace inflight::server {

using HttpRequest = boost::beast::http::request<boost::beast::http::string_body>;
using HttpResponse = boost::beast::http::response<boost::beast::http::string_body>;

class ResponseChannel {
 public:
  virtual ~ResponseChannel() = default;

  virtual boost::asio::any_io_executor executor() = 0;

  // A whole response (Content-Length, keep-alive and version are filled in by the channel).
  virtual void send(HttpResponse response) = 0;

  // Server-sent events: the 200 header goes out now, each send_event() one `data: <data>\n\n` frame,
  // end_events() closes the body.
  virtual void begin_events() = 0;
  virtual void send_event(const std::string& data) = 0;
  virtual void end_events() = 0;

  // Calls `on_gone` once, on executor(), if the client disconnects before the response is complete
  // (a failed write, or end of stream seen while the request runs).
  virtual void watch_client(std::function<void()> on_gone) = 0;
  virtual bool client_gone() const = 0;

  // When the request was fully received.
  virtual std::chrono::steady_clock::time_point received_at() const = 0;
};

}  // namespace inflight::server

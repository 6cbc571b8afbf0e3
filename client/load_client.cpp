#include "client/load_client.h"

#include <array>
#include <chrono>
#include <cmath>
#include <deque>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "client/sse_parser.h"

namespace inflight::client {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

std::chrono::steady_clock::duration to_duration(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// "HTTP 400 Bad Request: <the envelope's message>", the body itself when it is no envelope.
std::string http_error_message(unsigned status, beast::string_view reason, const std::string& body) {
  std::string message = "HTTP " + std::to_string(status) + " " + std::string(reason.data(), reason.size());
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_discarded() && j.is_object() && j.contains("error")) {
    const nlohmann::json& e = j["error"];
    if (e.is_object() && e.contains("message") && e["message"].is_string())
      return message + ": " + e["message"].get<std::string>();
    if (e.is_string()) return message + ": " + e.get<std::string>();
  }
  if (!body.empty()) message += ": " + body.substr(0, 300);
  return message;
}

http::request<http::string_body> make_request(http::verb verb, const ServerUrl& url, const std::string& path,
                                              const std::string& api_key, std::string body) {
  http::request<http::string_body> req{verb, path, 11};
  req.set(http::field::host, url.host + ":" + url.port);
  req.set(http::field::user_agent, "inflight-bench");
  if (!api_key.empty()) req.set(http::field::authorization, "Bearer " + api_key);
  if (verb == http::verb::post) {
    req.set(http::field::content_type, "application/json");
    req.set(http::field::accept, "text/event-stream");
  }
  req.keep_alive(false);
  req.body() = std::move(body);
  req.prepare_payload();
  return req;
}

// One streamed request on its own connection: connect, write, read the header, then read the body in
// pieces as they arrive, timing each piece's events. Every path ends in exactly one call of `done`.
class StreamingRequest : public std::enable_shared_from_this<StreamingRequest> {
 public:
  using DoneFn = std::function<void(RequestOutcome)>;

  StreamingRequest(net::io_context& io, const tcp::resolver::results_type& endpoints,
                   http::request<http::string_body> request, ApiKind api, int64_t client_prompt_tokens,
                   double timeout_s, Clock::time_point run_start, DoneFn done)
      : stream_(io), endpoints_(endpoints), request_(std::move(request)), reader_(api),
        client_prompt_tokens_(client_prompt_tokens), timeout_(to_duration(timeout_s)), run_start_(run_start),
        done_(std::move(done)) {
    // A stream is as long as the generation. NOTE: not boost::none: Beast 1.74 compares Content-Length with
    // the optional limit as `len > none`, which is always true, and refuses every Content-Length body.
    parser_.body_limit(std::numeric_limits<std::uint64_t>::max());
  }

  void start() {
    sent_at_ = Clock::now();
    outcome_.start_s = seconds_between(run_start_, sent_at_);
    do_connect();
  }

 private:
  void do_connect() {
    stream_.expires_after(timeout_);
    stream_.async_connect(endpoints_, beast::bind_front_handler(&StreamingRequest::on_connect, shared_from_this()));
  }
  void on_connect(beast::error_code ec, const tcp::endpoint&) {
    if (ec) return fail("connect: " + ec.message());
    do_write();
  }

  void do_write() {
    stream_.expires_after(timeout_);
    http::async_write(stream_, request_, beast::bind_front_handler(&StreamingRequest::on_write, shared_from_this()));
  }
  void on_write(beast::error_code ec, size_t) {
    if (ec) return fail("write: " + ec.message());
    do_read_header();
  }

  void do_read_header() {
    stream_.expires_after(timeout_);
    http::async_read_header(stream_, buffer_, parser_,
                            beast::bind_front_handler(&StreamingRequest::on_read_header, shared_from_this()));
  }
  void on_read_header(beast::error_code ec, size_t) {
    if (ec) return fail("read header: " + ec.message());
    status_ok_ = parser_.get().result() == http::status::ok;
    if (parser_.is_done()) return complete();
    do_read_body();
  }

  // NOTE: async_read_some, not async_read: the latter would wait for the whole buffer to fill.
  void do_read_body() {
    parser_.get().body().data = body_piece_.data();
    parser_.get().body().size = body_piece_.size();
    stream_.expires_after(timeout_);
    http::async_read_some(stream_, buffer_, parser_,
                          beast::bind_front_handler(&StreamingRequest::on_read_body, shared_from_this()));
  }
  void on_read_body(beast::error_code ec, size_t) {
    const double t = seconds_between(sent_at_, Clock::now());
    if (ec == http::error::need_buffer) ec = {};
    const size_t num_bytes = body_piece_.size() - parser_.get().body().size;
    const std::string_view piece(body_piece_.data(), num_bytes);
    if (status_ok_) {
      sse_.feed(piece, [&](std::string_view data) { reader_.on_event(data, t); });
    } else if (error_body_.size() < 4096) {
      error_body_.append(piece);
    }
    if (ec) {
      // A server that closes the connection right after [DONE] has said everything.
      if (status_ok_ && reader_.saw_done()) return complete();
      return fail("read body: " + ec.message());
    }
    if (parser_.is_done()) return complete();
    do_read_body();
  }

  void complete() {
    close();
    if (!status_ok_) {
      const auto& head = parser_.get();
      outcome_.success = false;
      outcome_.error = http_error_message(head.result_int(), head.reason(), error_body_);
    } else {
      sse_.finish([&](std::string_view data) { reader_.on_event(data, seconds_between(sent_at_, Clock::now())); });
      reader_.finish(client_prompt_tokens_, &outcome_);
    }
    done_(std::move(outcome_));
  }

  void fail(std::string what) {
    close();
    outcome_.success = false;
    outcome_.error = std::move(what);
    done_(std::move(outcome_));
  }

  void close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
  }

  beast::tcp_stream stream_;
  const tcp::resolver::results_type& endpoints_;  // owned by the run, which outlives every request
  http::request<http::string_body> request_;
  beast::flat_buffer buffer_;
  http::response_parser<http::buffer_body> parser_;
  std::array<char, 16384> body_piece_;  // one read's body bytes
  bool status_ok_ = false;
  std::string error_body_;  // a non-200 answer's body, for the error message
  SseParser sse_;
  OpenAiStreamReader reader_;
  int64_t client_prompt_tokens_;
  Clock::duration timeout_;
  Clock::time_point run_start_, sent_at_;
  RequestOutcome outcome_;
  DoneFn done_;
};

// One benchmark run: an arrival timer feeding a queue of ready requests, at most max_concurrency in flight.
class LoadRun {
 public:
  LoadRun(const LoadOptions& options, std::span<const BenchPrompt> prompts, const ProgressFn& progress)
      : options_(options), prompts_(prompts), progress_(progress), arrival_timer_(io_),
        outcomes_(prompts.size()) {
    url_ = parse_base_url(options.base_url);
    path_ = api_path(url_, options.api == ApiKind::Chat ? "chat/completions" : "completions");
    bodies_.reserve(prompts.size());
    for (const BenchPrompt& p : prompts) bodies_.push_back(request_body(options, p).dump());
    arrivals_ = arrival_offsets(int(prompts.size()), options.request_rate, options.burstiness, options.seed);
  }

  LoadRunResult run() {
    beast::error_code ec;
    endpoints_ = tcp::resolver(io_).resolve(url_.host, url_.port, ec);
    if (ec) throw std::runtime_error("cannot resolve " + url_.host + ":" + url_.port + ": " + ec.message());
    run_start_ = run_end_ = Clock::now();
    do_wait_arrival();
    io_.run();
    LoadRunResult result;
    result.duration_s = seconds_between(run_start_, run_end_);
    result.outcomes = std::move(outcomes_);
    return result;
  }

 private:
  void do_wait_arrival() {
    if (next_arrival_ == arrivals_.size()) return;
    arrival_timer_.expires_at(run_start_ + to_duration(arrivals_[next_arrival_]));
    arrival_timer_.async_wait([this](beast::error_code ec) { on_arrival(ec); });
  }
  void on_arrival(beast::error_code) {
    const double now = seconds_between(run_start_, Clock::now());
    while (next_arrival_ < arrivals_.size() && arrivals_[next_arrival_] <= now) ready_.push_back(next_arrival_++);
    launch_ready();
    do_wait_arrival();
  }

  void launch_ready() {
    while (!ready_.empty() && (options_.max_concurrency <= 0 || num_in_flight_ < options_.max_concurrency)) {
      const size_t index = ready_.front();
      ready_.pop_front();
      ++num_in_flight_;
      auto request = std::make_shared<StreamingRequest>(
          io_, endpoints_, make_request(http::verb::post, url_, path_, options_.api_key, bodies_[index]),
          options_.api, prompts_[index].prompt_len, options_.request_timeout_s, run_start_,
          [this, index](RequestOutcome outcome) { on_request_done(index, std::move(outcome)); });
      request->start();
    }
  }

  void on_request_done(size_t index, RequestOutcome outcome) {
    --num_in_flight_;
    ++num_done_;
    if (!outcome.success) ++num_failed_;
    outcomes_[index] = std::move(outcome);
    run_end_ = Clock::now();
    if (progress_) progress_(num_done_, num_failed_);
    // Posted, not called: the finished request's handler is still on the stack.
    net::post(io_, [this] { launch_ready(); });
  }

  const LoadOptions& options_;
  std::span<const BenchPrompt> prompts_;
  const ProgressFn& progress_;
  net::io_context io_;
  net::steady_timer arrival_timer_;
  ServerUrl url_;
  std::string path_;
  tcp::resolver::results_type endpoints_;
  std::vector<std::string> bodies_;  // [num prompts] serialised before the clock starts
  std::vector<double> arrivals_;     // [num prompts] seconds after run_start_
  size_t next_arrival_ = 0;
  std::deque<size_t> ready_;         // arrived, waiting for a concurrency slot
  int num_in_flight_ = 0;
  int64_t num_done_ = 0, num_failed_ = 0;
  Clock::time_point run_start_, run_end_;
  std::vector<RequestOutcome> outcomes_;
};

}  // namespace

ServerUrl parse_base_url(const std::string& url) {
  const std::string scheme = "http://";
  if (url.rfind("https://", 0) == 0)
    throw std::invalid_argument("--base-url " + url + ": https is not supported (plain http only)");
  if (url.rfind(scheme, 0) != 0) throw std::invalid_argument("--base-url " + url + ": must start with http://");
  const std::string rest = url.substr(scheme.size());
  const size_t slash = rest.find('/');
  const std::string authority = rest.substr(0, slash);
  ServerUrl out;
  out.path_prefix = slash == std::string::npos ? "" : rest.substr(slash);
  while (!out.path_prefix.empty() && out.path_prefix.back() == '/') out.path_prefix.pop_back();
  if (!authority.empty() && authority.front() == '[') {  // [v6 address]:port
    const size_t close = authority.find(']');
    if (close == std::string::npos) throw std::invalid_argument("--base-url " + url + ": unclosed '['");
    out.host = authority.substr(1, close - 1);
    out.port = close + 1 < authority.size() && authority[close + 1] == ':' ? authority.substr(close + 2) : "80";
  } else {
    const size_t colon = authority.rfind(':');
    out.host = authority.substr(0, colon);
    out.port = colon == std::string::npos ? "80" : authority.substr(colon + 1);
  }
  if (out.host.empty()) throw std::invalid_argument("--base-url " + url + ": no host");
  if (out.port.empty() || out.port.find_first_not_of("0123456789") != std::string::npos)
    throw std::invalid_argument("--base-url " + url + ": bad port '" + out.port + "'");
  return out;
}

std::string api_path(const ServerUrl& url, const std::string& route_under_v1) {
  const std::string& p = url.path_prefix;
  const bool has_v1 = p.size() >= 3 && p.compare(p.size() - 3, 3, "/v1") == 0;
  return p + (has_v1 ? "/" : "/v1/") + route_under_v1;
}

nlohmann::json request_body(const LoadOptions& options, const BenchPrompt& prompt) {
  nlohmann::json body = nlohmann::json::object();
  if (!options.model.empty()) body["model"] = options.model;
  if (options.api == ApiKind::Chat) {
    if (!prompt.ids.empty())
      throw std::invalid_argument("the chat endpoint takes text prompts, not token ids");
    body["messages"] = nlohmann::json::array({{{"role", "user"}, {"content", prompt.text}}});
  } else if (!prompt.ids.empty()) {
    body["prompt"] = prompt.ids;
  } else {
    body["prompt"] = prompt.text;
  }
  body["max_tokens"] = prompt.output_len;
  body["temperature"] = options.temperature;
  if (options.ignore_eos) body["ignore_eos"] = true;
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  body.update(options.extra_body);
  return body;
}

std::vector<double> arrival_offsets(int num_requests, double request_rate, double burstiness, uint64_t seed) {
  std::vector<double> out(size_t(std::max(num_requests, 0)), 0.0);
  if (std::isinf(request_rate) || out.empty()) return out;
  if (!(request_rate > 0)) throw std::invalid_argument("--request-rate must be > 0 or inf");
  if (!(burstiness > 0)) throw std::invalid_argument("--burstiness must be > 0");
  std::mt19937_64 rng(seed);
  // shape k = burstiness, scale 1/(rate k): mean gap 1/rate whatever the burstiness.
  std::gamma_distribution<double> gap(burstiness, 1.0 / (request_rate * burstiness));
  for (size_t i = 1; i < out.size(); ++i) out[i] = out[i - 1] + gap(rng);
  return out;
}

LoadRunResult run_load(const LoadOptions& options, std::span<const BenchPrompt> prompts, const ProgressFn& progress) {
  LoadRun run(options, prompts, progress);
  return run.run();
}

std::string fetch_first_model_id(const LoadOptions& options) {
  const ServerUrl url = parse_base_url(options.base_url);
  const std::string where = options.base_url + " /v1/models";
  net::io_context io;
  beast::error_code ec;
  const auto endpoints = tcp::resolver(io).resolve(url.host, url.port, ec);
  if (ec) throw std::runtime_error(where + ": cannot resolve " + url.host + ": " + ec.message());
  beast::tcp_stream stream(io);
  stream.expires_after(std::chrono::seconds(30));
  stream.connect(endpoints, ec);
  if (ec) throw std::runtime_error(where + ": connect: " + ec.message());
  http::write(stream, make_request(http::verb::get, url, api_path(url, "models"), options.api_key, {}), ec);
  beast::flat_buffer buffer;
  http::response<http::string_body> res;
  if (!ec) http::read(stream, buffer, res, ec);
  if (ec) throw std::runtime_error(where + ": " + ec.message());
  if (res.result() != http::status::ok)
    throw std::runtime_error(where + ": " + http_error_message(res.result_int(), res.reason(), res.body()));
  const nlohmann::json j = nlohmann::json::parse(res.body(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.contains("data") || !j["data"].is_array() || j["data"].empty() ||
      !j["data"][0].contains("id") || !j["data"][0]["id"].is_string())
    throw std::runtime_error(where + ": no model id in the answer: " + res.body().substr(0, 300));
  return j["data"][0]["id"].get<std::string>();
}

}  // namespace inflight::client

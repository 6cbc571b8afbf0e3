// The load client over real sockets against a scripted fake OpenAI server on 127.0.0.1: per-chunk timing,
// the concurrency limit, arrivals, and every kind of failure counted with its reason.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <nlohmann/json.hpp>

#include "client/load_client.h"

namespace net = boost::asio;
using tcp = net::ip::tcp;
using namespace inflight::client;

namespace {

constexpr auto kTokenGap = std::chrono::milliseconds(20);

// Answers by the request's prompt: token ids stream max_tokens chunks kTokenGap apart (chunked encoding,
// then a usage chunk and [DONE]); "plain" does the same without chunked encoding, ending at close;
// "status400" is a 400 envelope; "error-chunk" sends a token then an error chunk; "drop" sends a token and
// hangs up mid-body. GET /v1/models names one model.
class FakeOpenAiServer {
 public:
  FakeOpenAiServer() : acceptor_(io_, tcp::endpoint(net::ip::address_v4::loopback(), 0)) {
    port_ = acceptor_.local_endpoint().port();
    accept_thread_ = std::thread([this] { accept_loop(); });
  }
  ~FakeOpenAiServer() {
    stopping_ = true;
    tcp::socket wake(io_);
    boost::system::error_code ec;
    wake.connect(tcp::endpoint(net::ip::address_v4::loopback(), port_), ec);
    accept_thread_.join();
    std::lock_guard lock(mutex_);
    for (std::thread& t : connections_) t.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int max_active() const { return max_active_; }

 private:
  void accept_loop() {
    for (;;) {
      tcp::socket socket(io_);
      boost::system::error_code ec;
      acceptor_.accept(socket, ec);
      if (stopping_ || ec) return;
      std::lock_guard lock(mutex_);
      connections_.emplace_back([this, s = std::move(socket)]() mutable { serve(std::move(s)); });
    }
  }

  static void write(tcp::socket& s, const std::string& bytes) {
    boost::system::error_code ec;
    net::write(s, net::buffer(bytes), ec);
  }
  static void write_chunk(tcp::socket& s, const std::string& data) {
    char size[16];
    std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    write(s, size + data + "\r\n");
  }

  // Counts the connection as active until release(), which comes before the response's last byte: the client
  // cannot start its next request while this one still counts.
  struct ActiveGuard {
    std::atomic<int>& active;
    bool held = true;
    void release() {
      if (held) --active;
      held = false;
    }
    ~ActiveGuard() { release(); }
  };

  void serve(tcp::socket s) {
    const int active = ++active_;
    ActiveGuard guard{active_};
    int seen = max_active_;
    while (active > seen && !max_active_.compare_exchange_weak(seen, active)) {}
    net::streambuf buf;
    boost::system::error_code ec;
    const size_t header_end = net::read_until(s, buf, "\r\n\r\n", ec);
    if (ec) return;
    std::string head(net::buffers_begin(buf.data()), net::buffers_begin(buf.data()) + std::ptrdiff_t(header_end));
    buf.consume(header_end);
    std::transform(head.begin(), head.end(), head.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    size_t content_length = 0;
    if (const size_t p = head.find("content-length:"); p != std::string::npos)
      content_length = std::stoul(head.substr(p + 15));
    if (buf.size() < content_length) net::read(s, buf, net::transfer_exactly(content_length - buf.size()), ec);
    const std::string body_text(net::buffers_begin(buf.data()), net::buffers_end(buf.data()));

    if (head.rfind("get /v1/models", 0) == 0) {
      const std::string models = R"({"object":"list","data":[{"id":"fake-model","object":"model"}]})";
      write(s, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(models.size()) +
                   "\r\nConnection: close\r\n\r\n" + models);
      return;
    }
    const nlohmann::json body = nlohmann::json::parse(body_text);
    const std::string prompt = body["prompt"].is_string() ? body["prompt"].get<std::string>() : "ids";
    const int max_tokens = body["max_tokens"];
    const auto token_chunk = [](int i) {
      return "data: " + nlohmann::json{{"choices", {{{"index", 0}, {"text", " t" + std::to_string(i)}}}}}.dump() +
             "\n\n";
    };
    const std::string usage =
        "data: " +
        nlohmann::json{{"choices", nlohmann::json::array()},
                       {"usage", {{"prompt_tokens", body["prompt"].is_array() ? body["prompt"].size() : 1},
                                  {"completion_tokens", max_tokens}}}}
            .dump() +
        "\n\n";
    const std::string sse_head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n";

    if (prompt == "status400") {
      const std::string e = R"({"error":{"message":"bad prompt","type":"invalid_request_error","param":"prompt","code":null}})";
      write(s, "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: " +
                   std::to_string(e.size()) + "\r\nConnection: close\r\n\r\n" + e);
    } else if (prompt == "error-chunk") {
      write(s, sse_head + "Transfer-Encoding: chunked\r\n\r\n");
      write_chunk(s, token_chunk(0));
      write_chunk(s, "data: {\"error\":{\"message\":\"engine died\",\"type\":\"server_error\"}}\n\n");
      write_chunk(s, "data: [DONE]\n\n");
      write(s, "0\r\n\r\n");
    } else if (prompt == "drop") {
      write(s, sse_head + "Transfer-Encoding: chunked\r\n\r\n");
      write_chunk(s, token_chunk(0));
    } else if (prompt == "plain") {
      write(s, sse_head + "Connection: close\r\n\r\n");
      for (int i = 0; i < max_tokens; ++i) write(s, token_chunk(i));
      write(s, usage + "data: [DONE]\n\n");
    } else {
      write(s, sse_head + "Transfer-Encoding: chunked\r\n\r\n");
      for (int i = 0; i < max_tokens; ++i) {
        std::this_thread::sleep_for(kTokenGap);
        write_chunk(s, token_chunk(i));
      }
      write_chunk(s, usage);
      write_chunk(s, "data: [DONE]\n\n");
      guard.release();
      write(s, "0\r\n\r\n");
    }
    s.shutdown(tcp::socket::shutdown_both, ec);
  }

  net::io_context io_;
  tcp::acceptor acceptor_;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> active_{0}, max_active_{0};
  std::thread accept_thread_;
  std::mutex mutex_;
  std::vector<std::thread> connections_;
};

std::vector<BenchPrompt> text_prompts(const std::vector<std::string>& texts, int output_len) {
  std::vector<BenchPrompt> out;
  for (const std::string& t : texts) {
    out.emplace_back();
    out.back().text = t;
    out.back().output_len = output_len;
  }
  return out;
}

}  // namespace

TEST_SUITE("bench load client") {
  TEST_CASE("streams are timed per chunk, tokens come from usage, and max_concurrency holds") {
    FakeOpenAiServer server;
    LoadOptions o;
    o.base_url = server.url();
    o.max_concurrency = 2;
    const auto prompts = random_token_prompts(8, 6, 5, 100, 1);
    int64_t last_done = 0;
    const LoadRunResult r = run_load(o, prompts, [&](int64_t done, int64_t failed) {
      CHECK(done == last_done + 1);
      CHECK(failed == 0);
      last_done = done;
    });
    CHECK(last_done == 8);
    CHECK(server.max_active() == 2);
    // 4 waves of 5 tokens 20 ms apart.
    CHECK(r.duration_s >= 0.38);
    for (const RequestOutcome& out : r.outcomes) {
      CHECK_MESSAGE(out.success, out.error);
      CHECK(out.usage_reported);
      CHECK(out.prompt_tokens == 6);
      CHECK(out.output_tokens == 5);
      CHECK(out.num_chunks == 5);
      CHECK(out.ttft_s >= 0.018);
      REQUIRE(out.itl_s.size() == 4);
      // 4 gaps of 20 ms as sent; one gap alone may shrink when the client thread is descheduled.
      CHECK(std::accumulate(out.itl_s.begin(), out.itl_s.end(), 0.0) >= 0.075);
      CHECK(out.latency_s == doctest::Approx(out.ttft_s + std::accumulate(out.itl_s.begin(), out.itl_s.end(), 0.0)));
      CHECK(out.generated_text == " t0 t1 t2 t3 t4");
    }
  }

  TEST_CASE("failures are counted with their reasons, never dropped; an EOF-delimited stream succeeds") {
    FakeOpenAiServer server;
    LoadOptions o;
    o.base_url = server.url();
    const auto prompts = text_prompts({"status400", "error-chunk", "drop", "plain"}, 3);
    const LoadRunResult r = run_load(o, prompts, {});
    REQUIRE(r.outcomes.size() == 4);
    CHECK_FALSE(r.outcomes[0].success);
    CHECK(r.outcomes[0].error == "HTTP 400 Bad Request: bad prompt");
    CHECK_FALSE(r.outcomes[1].success);
    CHECK(r.outcomes[1].error.find("engine died") != std::string::npos);
    CHECK_FALSE(r.outcomes[2].success);
    CHECK(r.outcomes[2].error.find("read body") != std::string::npos);
    CHECK_MESSAGE(r.outcomes[3].success, r.outcomes[3].error);
    CHECK(r.outcomes[3].output_tokens == 3);
    const BenchmarkSummary s = summarize(r.outcomes, r.duration_s, {}, std::vector<double>{99});
    CHECK(s.completed == 1);
    CHECK(s.failed == 3);
  }

  TEST_CASE("a server that is not there: every request fails with the connect error") {
    uint16_t port = 0;
    {
      net::io_context io;
      tcp::acceptor a(io, tcp::endpoint(net::ip::address_v4::loopback(), 0));
      port = a.local_endpoint().port();
    }
    LoadOptions o;
    o.base_url = "http://127.0.0.1:" + std::to_string(port);
    const LoadRunResult r = run_load(o, text_prompts({"a", "b", "c"}, 2), {});
    REQUIRE(r.outcomes.size() == 3);
    for (const RequestOutcome& out : r.outcomes) {
      CHECK_FALSE(out.success);
      CHECK(out.error.rfind("connect:", 0) == 0);
    }
    CHECK_THROWS_AS(fetch_first_model_id(o), std::runtime_error);
  }

  TEST_CASE("requests start on the Poisson schedule; /v1/models gives the model name") {
    FakeOpenAiServer server;
    LoadOptions o;
    o.base_url = server.url();
    o.request_rate = 20;
    o.seed = 5;
    const LoadRunResult r = run_load(o, text_prompts(std::vector<std::string>(10, "plain"), 1), {});
    const std::vector<double> planned = arrival_offsets(10, 20, 1, 5);
    for (size_t i = 0; i < 10; ++i) {
      CHECK(r.outcomes[i].success);
      CHECK(r.outcomes[i].start_s >= planned[i] - 1e-3);
      CHECK(r.outcomes[i].start_s <= planned[i] + 0.25);  // loose: the machine may be busy
    }
    CHECK(fetch_first_model_id(o) == "fake-model");
  }
}

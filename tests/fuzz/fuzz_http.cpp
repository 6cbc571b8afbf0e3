// The HTTP request path in process, without sockets: bytes -> Beast's request parser (the server's header
// and body limits; several pipelined requests per input) -> the Router -> completion / chat parsing ->
// engine::Request -> Engine::submit's checks, over stories260K. The engine's queue holds no request
// (max_queue 0), so a request that passes every check ends as a 429 there, at once and deterministically.
// Every request must get exactly one answer, and never a 500 (an unexpected exception).
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/buffer.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/http.hpp>
#include <spdlog/spdlog.h>

#include "engine/model_loader.h"
#include "fuzz_support.h"
#include "server/chat_template.h"
#include "server/routes.h"

using namespace inflight;
namespace http = boost::beast::http;

namespace {

class RecordingChannel : public server::ResponseChannel {
 public:
  explicit RecordingChannel(boost::asio::io_context& io) : io_(io) {}
  boost::asio::any_io_executor executor() override { return io_.get_executor(); }
  void send(server::HttpResponse response) override { statuses.push_back(response.result_int()); }
  void begin_events() override { statuses.push_back(200); }
  void send_event(const std::string&) override {}
  void end_events() override {}
  void watch_client(std::function<void()> on_gone) override { on_gone(); }
  bool client_gone() const override { return true; }
  std::chrono::steady_clock::time_point received_at() const override { return std::chrono::steady_clock::now(); }

  std::vector<unsigned> statuses;

 private:
  boost::asio::io_context& io_;
};

struct Served {
  engine::LoadedModel loaded = engine::load_model(fuzz::stories_dir() + "/stories260K.gguf");
  engine::Model model{std::move(loaded.weights)};
  cache::KvCache kv{{model.config().num_layers, model.config().num_kv_heads, model.config().head_dim, 16, 64,
                     kernels::KvDType::F32}};
  engine::Engine engine{model, loaded.tokenizer, kv, [] {
                          engine::EngineConfig c;
                          c.max_queue = 0;  // every submit that passes the checks is refused: nothing runs
                          return c;
                        }()};
  server::ChatTemplate chat_template{server::choose_chat_template("llama2", {}), loaded.tokenizer};
  server::ServerState state{[] {
    server::ServerConfig c;
    c.max_body_bytes = 64 << 10;
    c.max_header_bytes = 8 << 10;
    return c;
  }()};
  server::ModelContext ctx;
  server::Router router{state};

  Served() {
    ctx.served_model_name = "stories";
    ctx.model_path = "stories260K.gguf";
    ctx.engine = &engine;
    ctx.tokenizer = &loaded.tokenizer;
    ctx.chat_template = &chat_template;
    ctx.max_model_len = engine.max_model_len();
    ctx.vocab_size = model.config().vocab_size;
    state.publish_model(&ctx);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Served* served = [] {
    spdlog::set_level(spdlog::level::off);
    return new Served();
  }();
  size_t pos = 0;
  while (pos < size) {
    http::request_parser<http::string_body> parser;
    parser.body_limit(uint64_t(served->state.config().max_body_bytes));
    parser.header_limit(uint32_t(served->state.config().max_header_bytes));
    parser.eager(true);
    boost::beast::error_code ec;
    while (pos < size && !parser.is_done()) {
      const size_t used = parser.put(boost::asio::buffer(data + pos, size - pos), ec);
      pos += used;
      if (ec || used == 0) break;
    }
    if (!parser.is_done()) return 0;  // a malformed or partial request: the server answers 4xx or closes
    boost::asio::io_context io;
    auto channel = std::make_shared<RecordingChannel>(io);
    http::request<http::string_body> request = parser.release();
    boost::asio::post(io, [&] { served->router.handle(std::move(request), channel); });
    io.run();
    if (channel->statuses.size() != 1) __builtin_trap();  // exactly one answer per request
    if (channel->statuses[0] >= 500) __builtin_trap();  // an unexpected exception
  }
  return 0;
}

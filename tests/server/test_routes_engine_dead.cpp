// The routes in process, over a real engine on stories260K: once the engine thread has stopped while the
// server runs on, /health and the API answer 503 with code "engine_dead" (and Retry-After), at once.
#include <doctest/doctest.h>

#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/http/verb.hpp>
#include <nlohmann/json.hpp>

#include "engine/model_loader.h"
#include "server/routes.h"
#include "test_support.h"

using namespace inflight;
namespace http = boost::beast::http;

namespace {

// Keeps what a route answers with a whole response; generation routes may not stream here.
class RecordingChannel : public server::ResponseChannel {
 public:
  explicit RecordingChannel(boost::asio::io_context& io) : io_(io) {}
  boost::asio::any_io_executor executor() override { return io_.get_executor(); }
  void send(server::HttpResponse response) override { responses.push_back(std::move(response)); }
  void begin_events() override { FAIL("a streamed answer where a whole response was expected"); }
  void send_event(const std::string&) override {}
  void end_events() override {}
  void watch_client(std::function<void()>) override {}
  bool client_gone() const override { return false; }
  std::chrono::steady_clock::time_point received_at() const override { return std::chrono::steady_clock::now(); }

  std::vector<server::HttpResponse> responses;

 private:
  boost::asio::io_context& io_;
};

server::HttpResponse answer(server::Router& router, http::verb verb, const std::string& target, const std::string& body) {
  boost::asio::io_context io;
  auto channel = std::make_shared<RecordingChannel>(io);
  server::HttpRequest request(verb, target, 11);
  request.set(http::field::content_type, "application/json");
  request.body() = body;
  request.prepare_payload();
  boost::asio::post(io, [&] { router.handle(std::move(request), channel); });
  io.run();
  REQUIRE(channel->responses.size() == 1);
  return channel->responses.front();
}

}  // namespace

TEST_CASE("routes: a stopped engine thread gives 503 engine_dead on /health and the API") {
  engine::LoadedModel loaded = engine::load_model(test::stories_gguf());
  engine::Model model(std::move(loaded.weights));
  const auto& c = model.config();
  cache::KvCache kv({c.num_layers, c.num_kv_heads, c.head_dim, 16, 64, kernels::KvDType::F32});
  engine::Engine eng(model, loaded.tokenizer, kv, {});

  server::ServerState state(server::ServerConfig{});
  server::ModelContext ctx;
  ctx.served_model_name = "stories";
  ctx.engine = &eng;
  ctx.tokenizer = &loaded.tokenizer;
  ctx.max_model_len = eng.max_model_len();
  ctx.vocab_size = c.vocab_size;
  state.publish_model(&ctx);
  server::Router router(state);
  const std::string completion = R"({"model": "stories", "prompt": "Once upon a time", "max_tokens": 4})";

  CHECK(answer(router, http::verb::get, "/health", "").result_int() == 200);
  CHECK(answer(router, http::verb::get, "/v1/models", "").result_int() == 200);

  eng.shutdown();  // the engine thread ends; the server does not stop
  REQUIRE_FALSE(eng.alive());
  REQUIRE_FALSE(state.stopping());
  for (const auto& [verb, target, body] : {std::tuple{http::verb::get, "/health", std::string()},
                                           std::tuple{http::verb::get, "/v1/models", std::string()},
                                           std::tuple{http::verb::post, "/v1/completions", completion}}) {
    CAPTURE(target);
    const server::HttpResponse r = answer(router, verb, target, body);
    CHECK(r.result_int() == 503);
    CHECK(r[http::field::retry_after] == std::to_string(state.config().retry_after_seconds));
    const nlohmann::json err = nlohmann::json::parse(r.body()).at("error");
    CHECK(err.at("code") == "engine_dead");
    CHECK(err.at("message") == "the engine thread has stopped");
  }
}

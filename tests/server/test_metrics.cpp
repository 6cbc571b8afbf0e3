// Prometheus exposition: cumulative histogram buckets, engine series present only once a model is loaded.
#include <doctest/doctest.h>

#include "server/metrics.h"

using namespace inflight;

TEST_SUITE("metrics") {
  TEST_CASE("histogram buckets are cumulative, with +Inf, sum and count") {
    server::Histogram h({0.1, 1.0});
    h.observe(0.05);
    h.observe(0.5);
    h.observe(0.5);
    h.observe(7.0);
    std::string out;
    h.render("x_seconds", &out);
    CHECK(out == "x_seconds_bucket{le=\"0.1\"} 1\nx_seconds_bucket{le=\"1\"} 3\nx_seconds_bucket{le=\"+Inf\"} 4\n"
                 "x_seconds_sum 8.05\nx_seconds_count 4\n");
  }

  TEST_CASE("engine series appear with stats, histograms always") {
    server::Metrics m;
    m.count_http_response(404);
    const std::string loading = m.render(nullptr);
    CHECK(loading.find("inflight_kv_cache_usage_ratio") == std::string::npos);
    CHECK(loading.find("inflight_time_to_first_token_seconds_count 0") != std::string::npos);
    CHECK(loading.find("inflight_http_responses_total{code=\"404\"} 1") != std::string::npos);
    engine::EngineStats s;
    s.kv_blocks_used = 3;
    s.kv_blocks_total = 12;
    s.finished_by_reason["stop"] = 2;
    const std::string ready = m.render(&s);
    CHECK(ready.find("inflight_kv_cache_usage_ratio 0.25\n") != std::string::npos);
    CHECK(ready.find("inflight_requests_total{finish_reason=\"stop\"} 2\n") != std::string::npos);
    CHECK(ready.find("inflight_requests_total{finish_reason=\"length\"} 0\n") != std::string::npos);
  }
}

// The metric math of `inflight bench` against hand-computed values (vLLM's definitions, numpy's percentiles).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <regex>
#include <vector>

#include "client/load_metrics.h"
#include "client/load_report.h"

using namespace inflight::client;

namespace {

// Values are binary fractions so that the sums below are exact.
//   A: start 0,   TTFT 0.125, 9 tokens, 8 gaps of 0.125   -> E2EL 1.125, TPOT 1.0 / 8 = 0.125
//   B: start 0.5, TTFT 0.25,  5 tokens, 4 gaps of 0.0625  -> E2EL 0.5,   TPOT 0.25 / 4 = 0.0625
//   C: start 1.5, TTFT 0.375, 1 token                      -> E2EL 0.375,  no TPOT (0 for goodput)
//   D: failed
RequestOutcome succeeded(int64_t prompt_tokens, int64_t output_tokens, double start_s, double ttft_s,
                         std::vector<double> itl_s) {
  RequestOutcome r;
  r.success = true;
  r.prompt_tokens = prompt_tokens;
  r.output_tokens = output_tokens;
  r.usage_reported = true;
  r.num_chunks = output_tokens;
  r.start_s = start_s;
  r.ttft_s = ttft_s;
  r.latency_s = ttft_s;
  for (double gap : itl_s) r.latency_s += gap;
  r.itl_s = std::move(itl_s);
  return r;
}

std::vector<RequestOutcome> sample_outcomes() {
  RequestOutcome failed;
  failed.error = "HTTP 400 Bad Request: too long";
  failed.prompt_tokens = 11;
  return {succeeded(5, 9, 0, 0.125, std::vector<double>(8, 0.125)),
          succeeded(7, 5, 0.5, 0.25, std::vector<double>(4, 0.0625)), succeeded(3, 1, 1.5, 0.375, {}), failed};
}

const std::vector<double> kPercentiles = {90, 99};

}  // namespace

TEST_SUITE("bench metrics") {
  TEST_CASE("percentile interpolates linearly between ranks like numpy") {
    CHECK(percentile({}, 50) == 0);
    CHECK(percentile({7}, 99) == 7);
    CHECK(percentile({4, 1, 3, 2}, 50) == doctest::Approx(2.5));
    CHECK(percentile({4, 1, 3, 2}, 0) == 1);
    CHECK(percentile({4, 1, 3, 2}, 100) == 4);
    CHECK(percentile({10, 20, 30}, 90) == doctest::Approx(28));    // rank 1.8
    CHECK(percentile({10, 20, 30}, 99) == doctest::Approx(29.8));  // rank 1.98
  }

  TEST_CASE("latency stats: mean, median, population std, percentiles in ms") {
    const std::vector<double> s = {0.125, 0.25, 0.375};
    const LatencyStats st = latency_stats(s, kPercentiles);
    CHECK(st.mean_ms == doctest::Approx(250));
    CHECK(st.median_ms == doctest::Approx(250));
    CHECK(st.std_ms == doctest::Approx(std::sqrt((125.0 * 125 * 2) / 3)));
    REQUIRE(st.percentiles_ms.size() == 2);
    CHECK(st.percentiles_ms[0].first == 90);
    CHECK(st.percentiles_ms[0].second == doctest::Approx(350));
    CHECK(st.percentiles_ms[1].second == doctest::Approx(372.5));
    const LatencyStats empty = latency_stats({}, kPercentiles);
    CHECK(empty.mean_ms == 0);
    CHECK(empty.std_ms == 0);
    CHECK(empty.percentiles_ms[1].second == 0);
  }

  TEST_CASE("TPOT excludes the first token; one-token requests have none") {
    const auto o = sample_outcomes();
    CHECK(tpot_seconds(o[0]) == doctest::Approx(0.125));
    CHECK(tpot_seconds(o[1]) == doctest::Approx(0.0625));
    CHECK(tpot_seconds(o[2]) == 0);
  }

  TEST_CASE("summary of a run with a failure: counts, throughputs, every latency metric") {
    const auto o = sample_outcomes();
    const BenchmarkSummary s = summarize(o, 2.0, {}, kPercentiles);
    CHECK(s.num_requests == 4);
    CHECK(s.completed == 3);
    CHECK(s.failed == 1);
    CHECK(s.total_input_tokens == 15);  // the failed request's prompt is not counted
    CHECK(s.total_output_tokens == 15);
    CHECK(s.request_throughput == doctest::Approx(1.5));
    CHECK(s.output_throughput == doctest::Approx(7.5));
    CHECK(s.total_token_throughput == doctest::Approx(15));
    CHECK_FALSE(s.request_goodput.has_value());

    CHECK(s.ttft.mean_ms == doctest::Approx(250));
    CHECK(s.ttft.median_ms == doctest::Approx(250));
    CHECK(s.ttft.percentiles_ms[0].second == doctest::Approx(350));

    // TPOT over A and B only: 125 and 62.5 ms.
    CHECK(s.tpot.mean_ms == doctest::Approx(93.75));
    CHECK(s.tpot.median_ms == doctest::Approx(93.75));
    CHECK(s.tpot.std_ms == doctest::Approx(31.25));
    CHECK(s.tpot.percentiles_ms[0].second == doctest::Approx(118.75));
    CHECK(s.tpot.percentiles_ms[1].second == doctest::Approx(124.375));

    // ITL pools every gap: 8 x 125 ms and 4 x 62.5 ms.
    CHECK(s.itl.mean_ms == doctest::Approx(1250.0 / 12));
    CHECK(s.itl.median_ms == doctest::Approx(125));
    CHECK(s.itl.percentiles_ms[0].second == doctest::Approx(125));

    CHECK(s.e2el.mean_ms == doctest::Approx(2000.0 / 3));
    CHECK(s.e2el.median_ms == doctest::Approx(500));
    CHECK(s.e2el.percentiles_ms[0].second == doctest::Approx(1000));

    // Chunks per whole second from t=0: A 7 + B 4 in [0,1); A 2, B 1, C 1 in [1,2). Active: 2 then 3.
    CHECK(s.max_output_tokens_per_s == 11);
    CHECK(s.max_concurrent_requests == 3);
  }

  TEST_CASE("goodput counts the requests meeting every SLO given, per second") {
    const auto o = sample_outcomes();
    // A fails TPOT (125 > 100), C fails TTFT (375 > 300): only B.
    CHECK(*summarize(o, 2.0, parse_goodput("ttft:300,tpot:100"), kPercentiles).request_goodput == doctest::Approx(0.5));
    // Only C ends within 400 ms.
    CHECK(*summarize(o, 2.0, parse_goodput("e2el:400"), kPercentiles).request_goodput == doctest::Approx(0.5));
    // All three successes; the failed one never counts.
    CHECK(*summarize(o, 2.0, parse_goodput("ttft:400 tpot:130 e2el:2000"), kPercentiles).request_goodput ==
          doctest::Approx(1.5));
    // C's TPOT is 0, so a strict TPOT SLO still admits it.
    CHECK(*summarize(o, 2.0, parse_goodput("tpot:1"), kPercentiles).request_goodput == doctest::Approx(0.5));
  }

  TEST_CASE("goodput specs: every metric, bad names and values are errors") {
    const GoodputSlo slo = parse_goodput("ttft:500,tpot:50,e2el:2000");
    CHECK(*slo.ttft_ms == 500);
    CHECK(*slo.tpot_ms == 50);
    CHECK(*slo.e2el_ms == 2000);
    CHECK_THROWS_WITH_AS(parse_goodput("itl:5"), doctest::Contains("itl"), std::invalid_argument);
    CHECK_THROWS_AS(parse_goodput("ttft"), std::invalid_argument);
    CHECK_THROWS_AS(parse_goodput("ttft:abc"), std::invalid_argument);
    CHECK_THROWS_AS(parse_goodput("ttft:-1"), std::invalid_argument);
    CHECK_THROWS_AS(parse_goodput(""), std::invalid_argument);
  }

  TEST_CASE("the result JSON carries every metric under vLLM's keys and every failure") {
    BenchmarkRun run;
    run.settings.percentiles = kPercentiles;
    run.settings.request_rate = INFINITY;
    run.settings.goodput = parse_goodput("ttft:300");
    run.outcomes = sample_outcomes();
    run.summary = summarize(run.outcomes, 2.0, run.settings.goodput, kPercentiles);
    const nlohmann::json j = result_json(run);
    for (const char* key : {"duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
                            "request_throughput", "request_goodput", "output_throughput", "total_token_throughput",
                            "max_output_tokens_per_s", "max_concurrent_requests", "input_lens", "output_lens",
                            "ttfts", "itls", "e2els", "errors", "generated_texts"})
      CHECK_MESSAGE(j.contains(key), key);
    for (const char* m : {"ttft", "tpot", "itl", "e2el"})
      for (const char* stat : {"mean", "median", "std", "p90", "p99"})
        CHECK_MESSAGE(j.contains(std::string(stat) + "_" + m + "_ms"), stat, "_", m);
    CHECK(j["request_rate"] == "inf");
    CHECK(j["failed"] == 1);
    CHECK(j["errors"][3] == "HTTP 400 Bad Request: too long");
    CHECK(j["output_lens"][3] == 0);
    CHECK(j["p90_tpot_ms"].get<double>() == doctest::Approx(118.75));

    // The sweep table: every row has as many cells as the header.
    const std::string table = format_sweep_table(std::span(&run, 1));
    std::vector<size_t> cells_per_line;
    for (size_t start = 0, end; (end = table.find('\n', start)) != std::string::npos; start = end + 1) {
      const std::string row = table.substr(start, end - start);
      if (!row.empty() && row[0] == '|') cells_per_line.push_back(size_t(std::count(row.begin(), row.end(), '|')));
    }
    REQUIRE(cells_per_line.size() == 3);
    CHECK(cells_per_line[1] == cells_per_line[0]);
    CHECK(cells_per_line[2] == cells_per_line[0]);
    CHECK(table.find("| inf | none | 3 | 1 |") != std::string::npos);

    const std::string report = format_report(run);
    CHECK(std::regex_search(report, std::regex(R"(Failed requests: +1 *\n)")));
    CHECK(report.find("1 x HTTP 400 Bad Request: too long") != std::string::npos);
    CHECK(report.find("P99 TPOT (ms):") != std::string::npos);
    CHECK(report.find("Request goodput (req/s):") != std::string::npos);
  }
}

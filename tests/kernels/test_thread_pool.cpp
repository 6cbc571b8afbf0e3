// ThreadPool: every task runs exactly once, exceptions reach the caller, runs are cheap and repeatable.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kernels/thread_pool.h"

using inflight::kernels::ThreadPool;

TEST_CASE("run executes every task exactly once and sums correctly") {
  for (int num_threads : {1, 2, 4}) {
    CAPTURE(num_threads);
    ThreadPool pool(num_threads);
    const int64_t num_tasks = 10000;
    std::vector<std::atomic<int>> hits(num_tasks);
    std::atomic<int64_t> sum{0};
    pool.run(num_tasks, [&](int64_t task) {
      hits[size_t(task)].fetch_add(1);
      sum.fetch_add(task);
    });
    CHECK(sum.load() == num_tasks * (num_tasks - 1) / 2);
    int64_t num_wrong = 0;
    for (auto& h : hits) num_wrong += h.load() != 1;
    CHECK(num_wrong == 0);
  }
}

TEST_CASE("run with zero or one task, and more tasks than fit one job ticket") {
  ThreadPool pool(3);
  int calls = 0;
  pool.run(0, [&](int64_t) { ++calls; });
  CHECK(calls == 0);
  pool.run(1, [&](int64_t task) { calls += int(task) + 1; });
  CHECK(calls == 1);
  const int64_t num_tasks = (int64_t(1) << 20) + 12345;  // split over two jobs internally
  std::atomic<int64_t> sum{0};
  pool.run(num_tasks, [&](int64_t task) { sum.fetch_add(task, std::memory_order_relaxed); });
  CHECK(sum.load() == num_tasks * (num_tasks - 1) / 2);
}

TEST_CASE("an exception in a task is rethrown in the caller and the pool stays usable") {
  ThreadPool pool(2);
  for (int round = 0; round < 50; ++round) {
    std::atomic<int> ran{0};
    CHECK_THROWS_AS(pool.run(64,
                             [&](int64_t task) {
                               ran.fetch_add(1);
                               if (task == 37) throw std::runtime_error("task 37 failed");
                             }),
                    std::runtime_error);
    CHECK(ran.load() <= 64);
  }
  std::atomic<int> ran{0};
  pool.run(64, [&](int64_t) { ran.fetch_add(1); });
  CHECK(ran.load() == 64);
  // The caller's own tasks throw too.
  CHECK_THROWS_WITH(pool.run(2, [](int64_t) { throw std::logic_error("both"); }), "both");
}

TEST_CASE("many consecutive small runs complete, including after workers fall asleep") {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  const int num_runs = 100000;
  for (int i = 0; i < num_runs; ++i) pool.run(2, [&](int64_t task) { total.fetch_add(task + 1); });
  CHECK(total.load() == int64_t(num_runs) * 3);
  for (int i = 0; i < 5; ++i) {  // sleep past the spin window so workers block on the condition variable
    std::this_thread::sleep_for(std::chrono::microseconds(ThreadPool::kSpinMicros * 5));
    pool.run(8, [&](int64_t) { total.fetch_add(1); });
  }
  CHECK(total.load() == int64_t(num_runs) * 3 + 40);
}

TEST_CASE("parallel_for covers [0, n) exactly once in chunks of at least grain") {
  ThreadPool pool(3);
  for (int64_t n : {1, 7, 100, 12345}) {
    for (int64_t grain : {1, 8, 1000}) {
      CAPTURE(n);
      CAPTURE(grain);
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::atomic<int> num_small{0};
      std::atomic<int> num_chunks{0};
      pool.parallel_for(n, grain, [&](int64_t begin, int64_t end) {
        num_chunks.fetch_add(1);
        if (end - begin < grain && end != n) num_small.fetch_add(1);
        for (int64_t i = begin; i < end; ++i) hits[size_t(i)].fetch_add(1);
      });
      int num_wrong = 0;
      for (auto& h : hits) num_wrong += h.load() != 1;
      CHECK(num_wrong == 0);
      CHECK(num_small.load() == 0);
      CHECK(num_chunks.load() <= pool.num_threads() * 4);
    }
  }
}

TEST_CASE("a run nested inside a task runs inline") {
  ThreadPool pool(2);
  std::atomic<int> inner{0};
  pool.run(4, [&](int64_t) { pool.run(3, [&](int64_t) { inner.fetch_add(1); }); });
  CHECK(inner.load() == 12);
}

TEST_CASE("resize changes the worker count and keeps working") {
  ThreadPool pool(1);
  for (int n : {4, 2, 1, 3}) {
    pool.resize(n);
    CHECK(pool.num_threads() == n);
    std::atomic<int> ran{0};
    pool.run(100, [&](int64_t) { ran.fetch_add(1); });
    CHECK(ran.load() == 100);
  }
}

TEST_CASE("concurrent callers from two threads are serialised") {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  auto caller = [&] {
    for (int i = 0; i < 2000; ++i) pool.run(5, [&](int64_t) { total.fetch_add(1); });
  };
  std::thread a(caller), b(caller);
  a.join();
  b.join();
  CHECK(total.load() == 2 * 2000 * 5);
}

TEST_CASE("compute_pool is a process-wide singleton sized by set_num_threads") {
  inflight::kernels::ThreadPool& pool = inflight::kernels::compute_pool();
  const int saved = pool.num_threads();
  inflight::kernels::set_num_threads(2);
  CHECK(&inflight::kernels::compute_pool() == &pool);
  CHECK(pool.num_threads() == 2);
  inflight::kernels::set_num_threads(saved);
  CHECK(pool.num_threads() == saved);
}

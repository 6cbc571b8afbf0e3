#include "kernels/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <utility>

namespace inflight::kernels {
namespace {

// Ticket fields: generation (bits 40..63), num_tasks (20..39), next_task (0..19).
constexpr int kTaskBits = 20;
constexpr uint64_t kTaskMask = (uint64_t(1) << kTaskBits) - 1;
constexpr int64_t kMaxTasksPerJob = int64_t(kTaskMask);
constexpr uint32_t kGenMask = (1u << 24) - 1;

uint32_t ticket_gen(uint64_t t) { return uint32_t(t >> (2 * kTaskBits)) & kGenMask; }
int64_t ticket_num(uint64_t t) { return int64_t((t >> kTaskBits) & kTaskMask); }
int64_t ticket_next(uint64_t t) { return int64_t(t & kTaskMask); }
uint64_t make_ticket(uint32_t gen, int64_t num) {
  return uint64_t(gen) << (2 * kTaskBits) | uint64_t(num) << kTaskBits;
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Polls `ready` for up to kSpinMicros; true if it became true.
template <class Pred>
bool spin_until(Pred ready) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::microseconds(ThreadPool::kSpinMicros);
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (ready()) return true;
      cpu_relax();
    }
    if (Clock::now() >= deadline) return ready();
  }
}

// Depth of pool tasks running on this thread; run() from inside a task goes inline.
thread_local int tls_task_depth = 0;

struct TaskScope {
  TaskScope() { ++tls_task_depth; }
  ~TaskScope() { --tls_task_depth; }
};

}  // namespace

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) { start_workers(); }

ThreadPool::~ThreadPool() { stop_workers(); }

void ThreadPool::resize(int num_threads) {
  std::lock_guard<std::mutex> run_lock(run_mu_);
  stop_workers();
  num_threads_ = std::max(1, num_threads);
  start_workers();
}

void ThreadPool::start_workers() {
  const uint32_t gen = ticket_gen(ticket_.load());
  workers_.reserve(size_t(num_threads_ - 1));
  for (int i = 1; i < num_threads_; ++i) {
    workers_.emplace_back([this, gen] { worker_loop(gen); });
  }
}

void ThreadPool::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
  }
  cv_work_.notify_all();
  for (std::thread& w : workers_) w.join();
  workers_.clear();
  stop_.store(false);
}

void ThreadPool::worker_loop(uint32_t seen_gen) {
  for (;;) {
    auto has_job = [&] { return stop_.load() || ticket_gen(ticket_.load()) != seen_gen; };
    if (!spin_until(has_job)) {
      std::unique_lock<std::mutex> lock(mu_);
      num_sleeping_workers_.fetch_add(1);
      cv_work_.wait(lock, has_job);
      num_sleeping_workers_.fetch_sub(1);
    }
    if (stop_.load()) return;
    seen_gen = ticket_gen(ticket_.load());
    drain(seen_gen);
  }
}

void ThreadPool::drain(uint32_t gen) {
  for (;;) {
    uint64_t t = ticket_.load(std::memory_order_relaxed);
    do {
      if (ticket_gen(t) != gen || ticket_next(t) >= ticket_num(t)) return;
    } while (!ticket_.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel, std::memory_order_relaxed));
    // The claim succeeded, so the caller is still inside run() for this job: fn_ and base_ are stable.
    if (!failed_.load(std::memory_order_relaxed)) {
      TaskScope scope;
      try {
        (*fn_)(base_ + ticket_next(t));
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        if (!error_) error_ = std::current_exception();
        failed_.store(true);
      }
    }
    if (tasks_done_.fetch_add(1) + 1 == ticket_num(t) && caller_sleeping_.load()) {
      std::lock_guard<std::mutex> lock(mu_);
      cv_done_.notify_one();
    }
  }
}

void ThreadPool::wait_until_done(int64_t num_tasks) {
  auto done = [&] { return tasks_done_.load() == num_tasks; };
  if (spin_until(done)) return;
  std::unique_lock<std::mutex> lock(mu_);
  caller_sleeping_.store(true);
  cv_done_.wait(lock, done);
  caller_sleeping_.store(false);
}

void ThreadPool::run(int64_t num_tasks, const std::function<void(int64_t task)>& fn) {
  if (num_tasks <= 0) return;
  if (num_threads_ == 1 || num_tasks == 1 || tls_task_depth > 0) {
    TaskScope scope;
    for (int64_t task = 0; task < num_tasks; ++task) fn(task);
    return;
  }
  std::lock_guard<std::mutex> run_lock(run_mu_);
  for (int64_t base = 0; base < num_tasks; base += kMaxTasksPerJob) {
    const int64_t count = std::min(kMaxTasksPerJob, num_tasks - base);
    fn_ = &fn;
    base_ = base;
    tasks_done_.store(0);
    const uint32_t gen = (ticket_gen(ticket_.load()) + 1) & kGenMask;
    ticket_.store(make_ticket(gen, count));  // seq_cst: pairs with the sleeping-worker count below
    if (num_sleeping_workers_.load() > 0) {
      std::lock_guard<std::mutex> lock(mu_);
      cv_work_.notify_all();
    }
    drain(gen);  // the caller's share
    wait_until_done(count);
    if (failed_.load()) {
      std::exception_ptr error;
      {
        std::lock_guard<std::mutex> lock(mu_);
        error = std::exchange(error_, nullptr);
      }
      failed_.store(false);
      std::rethrow_exception(error);
    }
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t max_chunks = int64_t(num_threads_) * 4;
  int64_t num_chunks = std::min((n + grain - 1) / grain, max_chunks);
  if (num_chunks <= 1) {
    fn(0, n);
    return;
  }
  // One pointer captured, so the std::function holds it inline (no allocation per call).
  struct Chunks {
    int64_t n, size;
    const std::function<void(int64_t, int64_t)>* fn;
  } chunks{n, (n + num_chunks - 1) / num_chunks, &fn};
  num_chunks = (n + chunks.size - 1) / chunks.size;
  run(num_chunks, [c = &chunks](int64_t task) {
    (*c->fn)(task * c->size, std::min(c->n, (task + 1) * c->size));
  });
}

namespace {

std::mutex g_pool_mu;
std::atomic<ThreadPool*> g_pool{nullptr};  // never deleted: workers may outlive static destructors

int default_num_threads() {
  if (const char* env = std::getenv("INFLIGHT_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace

ThreadPool& compute_pool() {
  if (ThreadPool* p = g_pool.load(std::memory_order_acquire)) return *p;
  std::lock_guard<std::mutex> lock(g_pool_mu);
  if (g_pool.load() == nullptr) g_pool.store(new ThreadPool(default_num_threads()));
  return *g_pool.load();
}

void set_num_threads(int n) {
  std::lock_guard<std::mutex> lock(g_pool_mu);
  if (ThreadPool* p = g_pool.load()) {
    if (p->num_threads() != std::max(1, n)) p->resize(n);
  } else {
    g_pool.store(new ThreadPool(n));
  }
}

}  // namespace inflight::kernels

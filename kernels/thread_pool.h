// The one compute thread pool every kernel parallelises on. The calling thread takes part in the work,
// so a pool of N threads runs N-1 workers.
//
// Cost model: run() is called ~10 times per layer per decode step, so a run must not pay a kernel
// wakeup when steps follow each other closely. Idle workers spin on the job ticket for a short while
// (kSpinMicros) and only then block on a condition variable.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace inflight::kernels {

class ThreadPool {
 public:
  static constexpr int kSpinMicros = 200;  // how long an idle thread polls before it sleeps

  explicit ThreadPool(int num_threads);  // num_threads >= 1 (values < 1 mean 1)
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Runs fn(task) for task in [0, num_tasks), spread over the pool; returns when all are done.
  // If a task throws, the remaining unstarted tasks are skipped and the first exception is rethrown
  // here. Called from inside a task (of any pool) it runs the tasks inline on the calling thread.
  // Concurrent callers from different threads are serialised.
  void run(int64_t num_tasks, const std::function<void(int64_t task)>& fn);

  // Splits [0, n) into about `num_threads * 4` chunks of at least `grain` items and runs
  // fn(begin, end) on each.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t begin, int64_t end)>& fn);

  // Joins the workers and starts num_threads - 1 new ones. Must not race with run().
  void resize(int num_threads);

 private:
  void start_workers();
  void stop_workers();
  // seen_gen: the generation current when the worker started (not a job to run).
  void worker_loop(uint32_t seen_gen);
  // Claims and runs tasks of job `gen` until none are left.
  void drain(uint32_t gen);
  void wait_until_done(int64_t num_tasks);

  int num_threads_ = 1;
  std::vector<std::thread> workers_;
  std::mutex run_mu_;  // serialises run() callers

  // The job ticket packs {generation:24, num_tasks:20, next_task:20} so a claim is one CAS that also
  // proves the job is still open; fn_ is read only after a successful claim, when the caller is
  // guaranteed to still be inside run() for that generation.
  // The job's line (written by the caller, read by the workers) and the completion count (written by
  // every thread that finishes a task, polled by the caller) lie on cache lines of their own.
  alignas(64) std::atomic<uint64_t> ticket_{0};
  const std::function<void(int64_t)>* fn_ = nullptr;
  int64_t base_ = 0;  // task index of the job's first task (run() splits huge task counts into jobs)
  alignas(64) std::atomic<int64_t> tasks_done_{0};
  alignas(64) std::exception_ptr error_;  // guarded by mu_
  std::atomic<bool> failed_{false};

  std::mutex mu_;  // guards error_; held around sleeping and notifying
  std::condition_variable cv_work_, cv_done_;
  std::atomic<int> num_sleeping_workers_{0};
  std::atomic<bool> caller_sleeping_{false};
  std::atomic<bool> stop_{false};
};

// The process-wide pool. Size: set_num_threads(n), else env INFLIGHT_NUM_THREADS, else the hardware
// concurrency.
ThreadPool& compute_pool();
// Resizes the process-wide pool; must not be called while kernels run.
void set_num_threads(int n);

}  // namespace inflight::kernels

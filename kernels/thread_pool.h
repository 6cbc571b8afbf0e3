// The one compute thread pool every kernel parallelises on. The calling thread takes part in the work,
// so a pool of N threads runs N-1 workers.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace inflight::kernels {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Runs fn(task) for task in [0, num_tasks), spread over the pool; returns when all are done.
  // Not re-entrant: a task must not call run() on the same pool.
  void run(int64_t num_tasks, const std::function<void(int64_t task)>& fn);

  // Splits [0, n) into about `num_threads * 4` chunks of at least `grain` items and runs
  // fn(begin, end) on each.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t begin, int64_t end)>& fn);

 private:
  void worker_loop();
  void drain();

  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_work_, cv_done_;
  const std::function<void(int64_t)>* fn_ = nullptr;
  int64_t num_tasks_ = 0;
  int64_t next_task_ = 0;    // guarded by mu_
  int64_t tasks_done_ = 0;   // guarded by mu_
  uint64_t generation_ = 0;  // bumps once per run()
  bool stop_ = false;
};

// The process-wide pool. Size: set_num_threads(n) before first use, else the hardware concurrency.
ThreadPool& compute_pool();
void set_num_threads(int n);

}  // namespace inflight::kernels

// The threads that run the models, so that no model runs on a gRPC thread. A bounded FIFO
// queue: Submit fails with RESOURCE_EXHAUSTED when it is full and UNAVAILABLE once the pool
// is stopping. Thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace attnserve::server {

class WorkerPool {
 public:
  // `task` gets the seconds it waited in the queue.
  using Task = std::function<void(double queue_seconds)>;

  WorkerPool(int threads, int64_t max_queue);
  ~WorkerPool();  // Stop()
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  absl::Status Submit(Task task);

  // Refuses new tasks, runs the queued ones, joins the threads. Idempotent.
  void Stop();

  int64_t queue_depth() const;
  int64_t busy() const;

 private:
  struct Item {
    Task task;
    int64_t enqueued_ns;
  };
  void Run();

  const int64_t max_queue_;
  mutable absl::Mutex mu_;
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t busy_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::thread> threads_;
};

}  // namespace attnserve::server

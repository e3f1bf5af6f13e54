#include "server/worker_pool.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace attnserve::server {

WorkerPool::WorkerPool(int threads, int64_t max_queue) : max_queue_(max_queue) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
}

WorkerPool::~WorkerPool() { Stop(); }

absl::Status WorkerPool::Submit(Task task) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return absl::UnavailableError("the server is shutting down");
  if (static_cast<int64_t>(queue_.size()) >= max_queue_) {
    return absl::ResourceExhaustedError(absl::StrCat("the request queue is full (", max_queue_,
                                                     " waiting; see --max_queue); retry later"));
  }
  queue_.push_back({std::move(task), absl::GetCurrentTimeNanos()});
  return absl::OkStatus();
}

void WorkerPool::Run() {
  while (true) {
    Item item;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](WorkerPool* p) { return p->stopping_ || !p->queue_.empty(); }, this));
      if (queue_.empty()) return;  // stopping and drained
      item = std::move(queue_.front());
      queue_.pop_front();
      ++busy_;
    }
    item.task((absl::GetCurrentTimeNanos() - item.enqueued_ns) * 1e-9);
    absl::MutexLock lock(&mu_);
    --busy_;
  }
}

void WorkerPool::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_ && threads_.empty()) return;
    stopping_ = true;
  }
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

int64_t WorkerPool::queue_depth() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(queue_.size());
}

int64_t WorkerPool::busy() const {
  absl::MutexLock lock(&mu_);
  return busy_;
}

}  // namespace attnserve::server

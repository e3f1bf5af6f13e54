// cpp-httplib's worker pool with a bound on the connections that wait for a worker: its own
// ThreadPool (0.11) queues without limit, so a flood of connections would hold unbounded
// sockets and memory. Here enqueue (called by the accepting thread) waits while
// `max_queued` connections already wait; the kernel's listen backlog then holds, and
// finally refuses, the rest.
#pragma once

#include <httplib.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace attnserve::server::openai {

class BoundedTaskQueue : public httplib::TaskQueue {
 public:
  BoundedTaskQueue(int threads, int max_queued) : max_queued_(max_queued) {
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { Work(); });
  }
  ~BoundedTaskQueue() override { shutdown(); }

  void enqueue(std::function<void()> fn) override {
    std::unique_lock<std::mutex> lock(mu_);
    room_.wait(lock, [this] { return stopping_ || static_cast<int>(queue_.size()) < max_queued_; });
    if (stopping_) return;
    queue_.push_back(std::move(fn));
    ready_.notify_one();
  }

  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_ && workers_.empty()) return;
      stopping_ = true;
    }
    ready_.notify_all();
    room_.notify_all();
    for (std::thread& t : workers_) t.join();
    workers_.clear();
  }

 private:
  void Work() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lock(mu_);
        ready_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, nothing left
        fn = std::move(queue_.front());
        queue_.pop_front();
      }
      room_.notify_one();
      fn();
    }
  }

  const int max_queued_;
  std::mutex mu_;
  std::condition_variable ready_, room_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace attnserve::server::openai

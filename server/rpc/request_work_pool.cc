#include "server/rpc/request_work_pool.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

#ifdef __linux__
#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace attnserve::server {

RequestWorkPool::RequestWorkPool(RequestWorkOptions options) : options_(options) {
  threads_.reserve(static_cast<size_t>(std::max(0, options_.threads)));
  for (int i = 0; i < options_.threads; ++i) threads_.emplace_back([this] { Loop(); });
}

RequestWorkPool::~RequestWorkPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    wake_.SignalAll();
  }
  for (std::thread& t : threads_) t.join();
}

absl::Status RequestWorkPool::Run(const std::string& client, int64_t bytes,
                                  std::function<void()> work) {
  if (bytes <= options_.inline_bytes || threads_.empty()) {
    work();
    return absl::OkStatus();
  }
  absl::MutexLock lock(&mu_);
  if (queued_ >= options_.max_queued) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the server has ", queued_,
                     " large requests waiting for tokenizing (--max_request_work_queued); "
                     "retry later"));
  }
  std::deque<std::function<void()>>& queue = queues_[client];
  if (static_cast<int64_t>(queue.size()) >= options_.max_queued_per_client) {
    return absl::ResourceExhaustedError(
        absl::StrCat("this client has ", queue.size(),
                     " large requests waiting for tokenizing (--max_request_work_per_client=",
                     options_.max_queued_per_client, "); wait for their answers"));
  }
  if (queue.empty()) turns_.push_back(client);
  queue.push_back(std::move(work));
  ++queued_;
  wake_.Signal();
  return absl::OkStatus();
}

int64_t RequestWorkPool::queued() const {
  absl::MutexLock lock(&mu_);
  return queued_;
}

int64_t RequestWorkPool::ran_on_pool() const {
  absl::MutexLock lock(&mu_);
  return ran_on_pool_;
}

void RequestWorkPool::Loop() {
#ifdef __linux__
  pthread_setname_np(pthread_self(), "request-work");
  // Per thread on Linux: a lower priority for this thread alone. Raising one's own nice value
  // needs no privilege; a failure leaves the thread at the server's priority.
  if (options_.nice != 0) {
    setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), options_.nice);
  }
#endif
  for (;;) {
    std::function<void()> work;
    {
      absl::MutexLock lock(&mu_);
      while (turns_.empty() && !stopping_) wake_.Wait(&mu_);
      if (turns_.empty()) return;  // stopping, and nothing is left
      // The client whose turn it is gives one item, then goes to the back of the line.
      std::string client = std::move(turns_.front());
      turns_.pop_front();
      auto it = queues_.find(client);
      work = std::move(it->second.front());
      it->second.pop_front();
      if (it->second.empty()) {
        queues_.erase(it);
      } else {
        turns_.push_back(std::move(client));
      }
      --queued_;
      ++ran_on_pool_;
    }
    work();
  }
}

absl::Status RunRequestWork(RequestWorkPool* pool, const std::string& client, int64_t bytes,
                            std::function<void()> work) {
  if (pool == nullptr) {
    work();
    return absl::OkStatus();
  }
  return pool->Run(client, bytes, std::move(work));
}

}  // namespace attnserve::server

// The CPU work of requests (tokenizing a prompt, detokenizing ids, building a large request's
// tensors) off the threads that accept and answer calls, so that one client's large texts
// never make another client's small calls wait.
//
// gRPC's callback threads are few (about one a core) and every call of every client passes
// through them: a handler that tokenizes 1 MiB holds one for tens to hundreds of milliseconds,
// and two such clients hold them all. So a door hands a request whose work is large (more than
// `inline_bytes` of text or ids) to this pool and returns at once; a pool thread does the work
// and then submits the request to the scheduler or finishes the call itself. Work at most
// `inline_bytes` (microseconds) runs at once on the calling thread: a small request never waits
// behind a queue.
//
// Fairness: each client (Caller::client: the principal, or the connection without
// authentication, as the scheduler's queue shares count it) has its own FIFO queue, and the
// threads take one item from each client in turn (round robin), so a client with many large
// requests queued delays another client's by at most one item per thread. A client may have at
// most `max_queued_per_client` items waiting (RESOURCE_EXHAUSTED beyond, nothing queued), and
// the pool at most `max_queued`. The threads run at a lower CPU priority (`nice`, Linux), so
// while they are busy the gRPC threads and the scheduler's still get the cores they need.
//
// The work goes on past the tokenizing on the same thread (the session's lookup, the
// scheduler's Submit, a store's read): short critical sections, which a preempted low-priority
// thread can hold for a few milliseconds at most while the cores are saturated (the waiter
// sleeps, which frees a core for it). Each thread keeps its tokenizer buffers (thread_local,
// bpe_model.cc) at their peak size: a few tens of MB after a 1 MiB piece.
//
// Threads: Run from any thread; the work runs on the caller's thread or one of the pool's.
// Work must not block on other queued work. The destructor runs what is still queued, then
// joins: destroy the pool after the gRPC server has shut down.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace attnserve::server {

struct RequestWorkOptions {
  int threads = 2;                     // --request_work_threads (0: no pool, all inline)
  int64_t inline_bytes = 4096;         // --request_work_inline_bytes
  int64_t max_queued_per_client = 16;  // --max_request_work_per_client
  int64_t max_queued = 1024;           // --max_request_work_queued
  int nice = 10;                       // --request_work_nice (0: the server's own priority)
};

class RequestWorkPool {
 public:
  explicit RequestWorkPool(RequestWorkOptions options);
  ~RequestWorkPool();
  RequestWorkPool(const RequestWorkPool&) = delete;
  RequestWorkPool& operator=(const RequestWorkPool&) = delete;

  // Runs `work` now on this thread when `bytes` <= inline_bytes (or the pool has no threads),
  // else queues it for `client`'s turn. RESOURCE_EXHAUSTED when the queue is full: `work` is
  // then not run and the caller answers the call.
  absl::Status Run(const std::string& client, int64_t bytes, std::function<void()> work);

  int64_t queued() const;       // items waiting
  int64_t ran_on_pool() const;  // items a pool thread ran, since the start

 private:
  void Loop();

  const RequestWorkOptions options_;
  mutable absl::Mutex mu_;
  absl::CondVar wake_;
  absl::flat_hash_map<std::string, std::deque<std::function<void()>>> queues_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> turns_ ABSL_GUARDED_BY(mu_);  // clients with work waiting, in turn
  int64_t queued_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t ran_on_pool_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

// `pool`->Run, or `work` inline when `pool` is null (no pool configured, e.g. in tests).
absl::Status RunRequestWork(RequestWorkPool* pool, const std::string& client, int64_t bytes,
                            std::function<void()> work);

}  // namespace attnserve::server

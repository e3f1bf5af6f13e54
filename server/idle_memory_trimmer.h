// Gives freed heap memory back to the kernel when that costs the server nothing.
//
// The server keeps freed memory on purpose (kernels/common/memory_reuse.h: a mixer call's
// buffers of tens of MiB are reused instead of page-faulted in again each call), so after a
// burst (1000 sessions that expired, a 32-stream load) its resident memory stays where the
// burst took it. This thread checks once a `poll` interval and calls malloc_trim
// (kernels::ReturnFreedMemory):
//   * once the server has been idle (no job queued or running, no iteration, no session opened
//     or freed) for
//     `idle_after` (--idle_memory_trim_s; zero: never), once per idle period: the next burst
//     pays the page faults again, an idle server holds only what it uses; this trim also
//     unmaps the KV buffers kept for reuse (kernels/common/huge_page_buffer.h's pool) and
//     calls `release_reserves` (the prefix cache's prefaulted memory);
//   * when the allocator's free heap is above `max_free_bytes` (--max_free_heap_bytes; 0: no
//     bound), busy or not, at most once every `bound_trim_every` (a trimmed heap still counts
//     the pages it released as free, so the bound alone would trim at every poll).
// Threads: one of its own ("memory-trimmer"), stopped by the destructor. `activity` is called
// on it: a counter that moves whenever the scheduler works (BatchScheduler::iterations).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace attnserve::server {

struct MemoryTrimOptions {
  absl::Duration idle_after = absl::Seconds(5);
  int64_t max_free_bytes = int64_t{1} << 30;
  absl::Duration poll = absl::Milliseconds(500);
  absl::Duration bound_trim_every = absl::Seconds(10);
  // Also called at the idle trim (on the trimmer's thread): frees memory kept ahead of need
  // elsewhere (the prefix cache's prefaulted entry memory).
  std::function<void()> release_reserves;
};

class IdleMemoryTrimmer {
 public:
  // `busy`: whether work is queued or running now; `activity`: a counter that moves with work.
  IdleMemoryTrimmer(MemoryTrimOptions options, std::function<bool()> busy,
                    std::function<int64_t()> activity);
  ~IdleMemoryTrimmer();
  IdleMemoryTrimmer(const IdleMemoryTrimmer&) = delete;
  IdleMemoryTrimmer& operator=(const IdleMemoryTrimmer&) = delete;

  int64_t trims() const { return trims_.load(); }

 private:
  void Run();

  const MemoryTrimOptions options_;
  const std::function<bool()> busy_;
  const std::function<int64_t()> activity_;
  std::atomic<int64_t> trims_{0};
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace attnserve::server

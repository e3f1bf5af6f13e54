#include "server/idle_memory_trimmer.h"

#include "absl/time/clock.h"
#include "common/thread_name.h"
#include "kernels/common/huge_page_buffer.h"
#include "kernels/common/memory_reuse.h"

namespace attnserve::server {

IdleMemoryTrimmer::IdleMemoryTrimmer(MemoryTrimOptions options, std::function<bool()> busy,
                                     std::function<int64_t()> activity)
    : options_(options), busy_(std::move(busy)), activity_(std::move(activity)) {
  thread_ = std::thread([this] {
    NameThisThread("memory-trimmer");
    Run();
  });
}

IdleMemoryTrimmer::~IdleMemoryTrimmer() {
  stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

void IdleMemoryTrimmer::Run() {
  int64_t last_activity = activity_();
  absl::Time quiet_since = absl::Now();
  bool trimmed_this_quiet = false;
  absl::Time last_bound_trim = absl::InfinitePast();
  while (!stop_.WaitForNotificationWithTimeout(options_.poll)) {
    const int64_t activity = activity_();
    const absl::Time now = absl::Now();
    if (activity != last_activity || busy_()) {
      last_activity = activity;
      quiet_since = now;
      trimmed_this_quiet = false;
    }
    if (options_.idle_after > absl::ZeroDuration() && !trimmed_this_quiet &&
        now - quiet_since >= options_.idle_after) {
      kernels::ReleaseHugePageBufferPool();
      if (options_.release_reserves) options_.release_reserves();
      kernels::ReturnFreedMemory();
      trims_.fetch_add(1);
      trimmed_this_quiet = true;
      continue;
    }
    if (options_.max_free_bytes > 0 && now - last_bound_trim >= options_.bound_trim_every &&
        kernels::FreeHeapBytes() > static_cast<size_t>(options_.max_free_bytes)) {
      kernels::ReturnFreedMemory();
      trims_.fetch_add(1);
      last_bound_trim = now;
    }
  }
}

}  // namespace attnserve::server

#include "server/prefix_cache/prefaulted_blocks.h"

#include <ATen/ATen.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <vector>

#include "kernels/common/huge_page_buffer.h"

namespace attnserve::server {
namespace {

constexpr size_t kPage = size_t{4} << 10;
constexpr size_t kAlign = 64;

size_t RoundUp(size_t bytes, size_t to) { return (bytes + to - 1) / to * to; }

void* Allocate(size_t bytes) {
  void* p = nullptr;
  if (posix_memalign(&p, kAlign, bytes) != 0) throw std::bad_alloc();
  return p;
}

// Writes one byte of each page, so that every page is backed before the block is handed out;
// stops early (the rest faults in when the block is written) once `idle` turns false.
void FaultIn(void* p, size_t bytes, const std::atomic<bool>& idle) {
  volatile char* c = static_cast<char*>(p);
  for (size_t i = 0; i < bytes; i += kPage) {
    c[i] = 0;
    if (i % (16 * kPage) == 0 && !idle.load(std::memory_order_relaxed)) return;
  }
}

}  // namespace

struct PrefaultedBlocks::Core {
  mutable std::mutex mu;
  std::condition_variable wake;  // the filler: a block was taken, room changed, or stop
  bool stop = false;
  std::atomic<bool> idle{true};  // SetIdle: the filler works only while true
  const size_t reserve;
  size_t room;
  std::map<size_t, std::vector<void*>> ready;  // by block size
  size_t ready_bytes = 0;
  std::vector<size_t> wanted;  // sizes last taken, most recent first, at most kSizes
  int64_t served_ready = 0, served_fresh = 0;

  explicit Core(size_t reserve_bytes) : reserve(reserve_bytes), room(reserve_bytes) {}

  size_t Limit() const { return std::min(reserve, room); }
  size_t Share() const { return wanted.empty() ? 0 : Limit() / wanted.size(); }
  size_t ReadyOf(size_t size) const {
    auto it = ready.find(size);
    return it == ready.end() ? 0 : it->second.size() * size;
  }
  // Whether one more ready block of `size` fits. Called with mu held.
  bool Wants(size_t size) const {
    return std::find(wanted.begin(), wanted.end(), size) != wanted.end() &&
           ReadyOf(size) + size <= Share() && ready_bytes + size <= Limit();
  }
  void Keep(void* p, size_t size) {
    ready[size].push_back(p);
    ready_bytes += size;
  }
  // Ready blocks beyond their size's share, or of a size no longer wanted, taken out; freed by
  // the caller outside mu. Each wanted size's share is Limit() / wanted.size(), so this also
  // keeps them all within Limit(). A size's share shrinks when another size is wanted: before,
  // blocks made ready for one model kept the whole reserve, and the next model's entries were
  // never made ready (every mamba entry paged in on the scheduler's thread after the hybrid's:
  // 17 a prompt against 0.7). Called with mu held.
  std::vector<void*> TrimReady() {
    std::vector<void*> out;
    for (auto& [size, blocks] : ready) {
      const bool is_wanted = std::find(wanted.begin(), wanted.end(), size) != wanted.end();
      const size_t keep = is_wanted ? Share() : 0;
      while (!blocks.empty() && blocks.size() * size > keep) {
        out.push_back(blocks.back());
        blocks.pop_back();
        ready_bytes -= size;
      }
    }
    return out;
  }

  // Every ready block, taken out; freed by the caller outside mu. Called with mu held.
  std::vector<void*> TakeAllReady() {
    std::vector<void*> out;
    for (auto& [size, blocks] : ready) out.insert(out.end(), blocks.begin(), blocks.end());
    ready.clear();
    ready_bytes = 0;
    return out;
  }

  void Give(void* p, size_t size) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!stop && Wants(size)) {
        Keep(p, size);
        return;
      }
    }
    std::free(p);
  }

  void Fill() {
    // Only when no other thread of the machine wants a core (Linux; elsewhere it stays a normal
    // thread, which only changes when the faults are taken).
    sched_param param{};
    pthread_setschedparam(pthread_self(), SCHED_IDLE, &param);
    pthread_setname_np(pthread_self(), "prefault");  // in top -H, perf and /proc/*/task
    std::unique_lock<std::mutex> lock(mu);
    while (!stop) {
      size_t size = 0;
      for (const size_t s : wanted) {
        if (!idle.load()) break;
        if (Wants(s)) {
          size = s;
          break;
        }
      }
      if (size == 0) {
        // Then the KV buffers that requests mapped fresh since the last idle time.
        if (idle.load()) {
          lock.unlock();
          bool mapped = false;
          try {
            mapped = kernels::PrefaultHugePageBuffer(idle);
          } catch (const std::bad_alloc&) {  // no mapping: the request maps its own
          }
          lock.lock();
          if (mapped) continue;
        }
        wake.wait(lock);
        continue;
      }
      lock.unlock();
      void* p = nullptr;
      try {
        p = Allocate(size);
        FaultIn(p, size, idle);
      } catch (const std::bad_alloc&) {
        p = nullptr;
      }
      lock.lock();
      if (p == nullptr) {
        wake.wait(lock);  // the heap refused: try again when something changes
      } else if (!stop && Wants(size)) {
        Keep(p, size);
      } else {
        std::free(p);
      }
    }
  }
};

PrefaultedBlocks::PrefaultedBlocks(int64_t reserve_bytes)
    : core_(std::make_shared<Core>(reserve_bytes > 0 ? static_cast<size_t>(reserve_bytes) : 0)) {
  if (core_->reserve > 0) filler_ = std::thread([core = core_] { core->Fill(); });
}

PrefaultedBlocks::~PrefaultedBlocks() {
  std::vector<void*> drop;
  {
    std::lock_guard<std::mutex> lock(core_->mu);
    core_->stop = true;
    drop = core_->TakeAllReady();
  }
  core_->wake.notify_all();
  if (filler_.joinable()) filler_.join();
  for (void* p : drop) std::free(p);
}

at::Tensor PrefaultedBlocks::Take(int64_t bytes) {
  const size_t size = RoundUp(static_cast<size_t>(std::max<int64_t>(bytes, 1)), kPage);
  void* p = nullptr;
  std::vector<void*> drop;  // ready blocks beyond their share or of a size no longer wanted
  {
    std::lock_guard<std::mutex> lock(core_->mu);
    std::vector<size_t>& wanted = core_->wanted;
    auto it = std::find(wanted.begin(), wanted.end(), size);
    if (it != wanted.end()) wanted.erase(it);
    wanted.insert(wanted.begin(), size);
    if (wanted.size() > static_cast<size_t>(kSizes)) wanted.pop_back();
    drop = core_->TrimReady();
    auto ready = core_->ready.find(size);
    if (ready != core_->ready.end() && !ready->second.empty()) {
      p = ready->second.back();
      ready->second.pop_back();
      core_->ready_bytes -= size;
      ++core_->served_ready;
    } else {
      ++core_->served_fresh;
    }
  }
  core_->wake.notify_one();
  for (void* q : drop) std::free(q);
  if (p == nullptr) p = Allocate(size);
  return at::from_blob(
      p, {bytes}, [core = core_, size](void* q) { core->Give(q, size); },
      at::TensorOptions().dtype(at::kByte));
}

void PrefaultedBlocks::SetIdle(bool idle) {
  if (core_->idle.load() == idle) return;
  {
    std::lock_guard<std::mutex> lock(core_->mu);  // so that the filler cannot miss the wake-up
    core_->idle.store(idle);
  }
  if (idle) core_->wake.notify_one();
}

void PrefaultedBlocks::Release() {
  std::vector<void*> drop;
  {
    std::lock_guard<std::mutex> lock(core_->mu);
    drop = core_->TakeAllReady();
    core_->wanted.clear();
  }
  for (void* p : drop) std::free(p);
}

void PrefaultedBlocks::SetRoom(int64_t bytes) {
  std::vector<void*> drop;
  {
    std::lock_guard<std::mutex> lock(core_->mu);
    core_->room = static_cast<size_t>(std::max<int64_t>(bytes, 0));
    drop = core_->TrimReady();
  }
  core_->wake.notify_one();
  for (void* p : drop) std::free(p);
}

PrefaultedBlocksStats PrefaultedBlocks::stats() const {
  std::lock_guard<std::mutex> lock(core_->mu);
  PrefaultedBlocksStats s;
  s.ready_bytes = static_cast<int64_t>(core_->ready_bytes);
  for (const auto& [size, blocks] : core_->ready)
    s.ready_blocks += static_cast<int64_t>(blocks.size());
  s.served_ready = core_->served_ready;
  s.served_fresh = core_->served_fresh;
  return s;
}

}  // namespace attnserve::server

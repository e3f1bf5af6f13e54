#include "kernels/common/huge_page_buffer.h"

#include <ATen/ATen.h>
#include <sys/mman.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <new>
#include <unordered_set>
#include <utility>
#include <vector>

namespace attnserve::kernels {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kPage = size_t{4} << 10;

size_t RoundUp(size_t bytes, size_t to) { return (bytes + to - 1) / to * to; }

// A mapping of `bytes` (a multiple of kPage) that starts on a huge-page boundary: map one huge
// page more, then unmap what lies before the boundary and past the end.
void* MapAligned(size_t bytes) {
  const size_t mapped = bytes + kHugePage;
  void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  const uintptr_t start = reinterpret_cast<uintptr_t>(p);
  const uintptr_t aligned = RoundUp(start, kHugePage);
  if (aligned > start) munmap(p, aligned - start);
  const uintptr_t end = start + mapped, used_end = aligned + bytes;
  if (end > used_end) munmap(reinterpret_cast<void*>(used_end), end - used_end);
  return reinterpret_cast<void*>(aligned);
}

// Freed mappings kept for reuse, oldest first, within `bound` bytes.
struct Pool {
  std::mutex mu;
  std::deque<std::pair<void*, size_t>> free;  // (address, mapped bytes)
  size_t bytes = 0;
  size_t bound = kDefaultHugePageBufferPoolBytes;
  int64_t reused = 0;
  // Sizes to page in ahead (PrefaultHugePageBuffer), oldest first: each request mapped fresh or
  // served by a buffer paged in ahead adds its size (a buffer a tensor gave back is reuse, not
  // growth: taking it adds nothing).
  std::vector<size_t> missed;
  std::unordered_set<void*> ahead;  // buffers in `free` paged in ahead and not used since
  int64_t prefaulted = 0;
};

// Sizes kept in Pool::missed (the first ones missed go first).
constexpr size_t kMissedKept = 16;

// Never destroyed: a tensor freed during exit still returns its mapping here.
Pool& ThePool() {
  static Pool* pool = new Pool;
  return *pool;
}

// The smallest pooled mapping that holds `bytes` and wastes at most a quarter of them plus one
// huge page (so that a small request does not pin a much larger buffer), taken out of the pool;
// {nullptr, 0} when none. A buffer paged in ahead adds `bytes` to the sizes to page in next.
std::pair<void*, size_t> TakeFromPool(size_t bytes) {
  Pool& pool = ThePool();
  std::lock_guard<std::mutex> lock(pool.mu);
  const size_t most = bytes + bytes / 4 + kHugePage;
  auto best = pool.free.end();
  // Of equal sizes, a buffer given back before one paged in ahead (that one stays ahead).
  auto better = [&](auto it) {
    return best == pool.free.end() || it->second < best->second ||
           (it->second == best->second && pool.ahead.count(best->first) > 0 &&
            pool.ahead.count(it->first) == 0);
  };
  for (auto it = pool.free.begin(); it != pool.free.end(); ++it) {
    if (it->second >= bytes && it->second <= most && better(it)) best = it;
  }
  if (best == pool.free.end()) return {nullptr, 0};
  const std::pair<void*, size_t> taken = *best;
  pool.free.erase(best);
  pool.bytes -= taken.second;
  ++pool.reused;
  if (pool.ahead.erase(taken.first) > 0 && pool.missed.size() < kMissedKept) {
    pool.missed.push_back(bytes);
  }
  return taken;
}

// Unmaps `mappings` (taken out of the pool; outside its lock).
void UnmapAll(const std::vector<std::pair<void*, size_t>>& mappings) {
  for (const auto& [p, mapped] : mappings) munmap(p, mapped);
}

// Takes the oldest mappings out of the pool until it is within its bound; the caller unmaps
// them after unlocking. Called with pool.mu held.
std::vector<std::pair<void*, size_t>> OverBound(Pool& pool) {
  std::vector<std::pair<void*, size_t>> unmap;
  while (pool.bytes > pool.bound) {
    unmap.push_back(pool.free.front());
    pool.bytes -= pool.free.front().second;
    pool.ahead.erase(pool.free.front().first);
    pool.free.pop_front();
  }
  return unmap;
}

// `ahead`: paged in by PrefaultHugePageBuffer (else a tensor's buffer, freed).
void GiveBack(void* p, size_t mapped, bool ahead = false) {
  Pool& pool = ThePool();
  std::vector<std::pair<void*, size_t>> unmap;
  {
    std::lock_guard<std::mutex> lock(pool.mu);
    pool.free.emplace_back(p, mapped);
    pool.bytes += mapped;
    if (ahead) pool.ahead.insert(p);
    unmap = OverBound(pool);
  }
  UnmapAll(unmap);
}

}  // namespace

void SetHugePageBufferPoolBytes(int64_t bytes) {
  Pool& pool = ThePool();
  std::vector<std::pair<void*, size_t>> unmap;
  {
    std::lock_guard<std::mutex> lock(pool.mu);
    pool.bound = static_cast<size_t>(bytes > 0 ? bytes : 0);
    unmap = OverBound(pool);  // shrinks to the new bound at once
  }
  UnmapAll(unmap);
}

HugePageBufferPoolStats HugePageBufferPool() {
  Pool& pool = ThePool();
  std::lock_guard<std::mutex> lock(pool.mu);
  return {static_cast<int64_t>(pool.bytes), static_cast<int64_t>(pool.free.size()), pool.reused,
          pool.prefaulted};
}

void ReleaseHugePageBufferPool() {
  Pool& pool = ThePool();
  std::vector<std::pair<void*, size_t>> unmap;
  {
    std::lock_guard<std::mutex> lock(pool.mu);
    unmap.assign(pool.free.begin(), pool.free.end());
    pool.free.clear();
    pool.ahead.clear();
    pool.bytes = 0;
    pool.missed.clear();  // an idle server holds only what it uses
  }
  UnmapAll(unmap);
}

bool PrefaultHugePageBuffer(const std::atomic<bool>& keep_going) {
  Pool& pool = ThePool();
  size_t size = 0;
  {
    std::lock_guard<std::mutex> lock(pool.mu);
    while (!pool.missed.empty() && size == 0) {
      const size_t s = pool.missed.front();
      pool.missed.erase(pool.missed.begin());
      if (pool.bytes + s <= pool.bound) size = s;
    }
  }
  if (size == 0) return false;
  void* data = MapAligned(size);
#ifdef MADV_HUGEPAGE
  madvise(data, size, MADV_HUGEPAGE);
#endif
  volatile char* c = static_cast<char*>(data);
  for (size_t i = 0; i < size && keep_going.load(std::memory_order_relaxed); i += kPage) c[i] = 0;
  {
    std::lock_guard<std::mutex> lock(pool.mu);
    ++pool.prefaulted;
  }
  GiveBack(data, size, /*ahead=*/true);
  return true;
}

at::Tensor EmptyHugePageBuffer(at::IntArrayRef sizes, const at::TensorOptions& options) {
  int64_t elements = 1;
  for (const int64_t s : sizes) elements *= s;
  const int64_t bytes =
      elements * static_cast<int64_t>(c10::elementSize(c10::typeMetaToScalarType(options.dtype())));
  if (!options.device().is_cpu() || bytes < kHugePageBufferMinBytes) {
    return at::empty(sizes, options);
  }
  const size_t needed = RoundUp(static_cast<size_t>(bytes), kPage);
  auto [data, mapped] = TakeFromPool(needed);
  if (data == nullptr) {
    {
      Pool& pool = ThePool();
      std::lock_guard<std::mutex> lock(pool.mu);
      if (pool.missed.size() < kMissedKept) pool.missed.push_back(needed);
    }
    mapped = needed;
    data = MapAligned(mapped);
    // Its whole huge pages are backed by huge pages, the part past the last one by ordinary
    // pages. Advice is only advice: where the kernel has no THP this fails and the pages are
    // ordinary.
#ifdef MADV_HUGEPAGE
    madvise(data, mapped, MADV_HUGEPAGE);
#endif
  }
  return at::from_blob(
      data, sizes, [mapped = mapped](void* p) { GiveBack(p, mapped); }, options);
}

}  // namespace attnserve::kernels

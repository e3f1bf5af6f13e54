#include "server/prefix_cache/block_slabs.h"

#include <algorithm>
#include <new>

#include "kernels/common/huge_page_buffer.h"

namespace attnserve::server {
namespace {

constexpr size_t kHugePage = static_cast<size_t>(kernels::kHugePageBytes);
constexpr size_t kBlocksPerSlab = 8;

size_t RoundUp(size_t bytes, size_t to) { return (bytes + to - 1) / to * to; }

}  // namespace

BlockSlabs::~BlockSlabs() {
  for (const auto& [start, slab] : slabs_) {
    kernels::UnmapHugePages(reinterpret_cast<void*>(start), slab.bytes);
  }
}

std::map<uintptr_t, BlockSlabs::Slab>::iterator BlockSlabs::SlabOf(const void* block) {
  auto it = slabs_.upper_bound(reinterpret_cast<uintptr_t>(block));
  return std::prev(it);  // the last slab starting at or before the block
}

void* BlockSlabs::Take(size_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  void* block = nullptr;
  if (auto it = free_.find(size); it != free_.end() && !it->second.empty()) {
    block = it->second.back();
    it->second.pop_back();
  } else {
    auto carving = carving_.find(size);
    Slab* slab = nullptr;
    uintptr_t start = 0;
    if (carving != carving_.end()) {
      start = carving->second;
      slab = &slabs_.at(start);
      if (slab->carved + size > slab->bytes) slab = nullptr;
    }
    if (slab == nullptr) {
      const size_t bytes = RoundUp(std::max(size * kBlocksPerSlab, kHugePage), kHugePage);
      start = reinterpret_cast<uintptr_t>(kernels::MapHugePages(bytes));
      slab = &slabs_.emplace(start, Slab{bytes, size, 0, 0}).first->second;
      carving_[size] = start;
      mapped_ += bytes;
    }
    block = reinterpret_cast<void*>(start + slab->carved);
    slab->carved += size;
  }
  ++SlabOf(block)->second.taken;
  taken_ += size;
  return block;
}

void BlockSlabs::Give(void* block, size_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  --SlabOf(block)->second.taken;
  taken_ -= size;
  free_[size].push_back(block);
}

void BlockSlabs::ReleaseFree() {
  std::vector<std::pair<void*, size_t>> unmap;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = slabs_.begin(); it != slabs_.end();) {
      if (it->second.taken > 0) {
        ++it;
        continue;
      }
      const uintptr_t start = it->first, end = start + it->second.bytes;
      std::vector<void*>& free = free_[it->second.block];
      free.erase(std::remove_if(free.begin(), free.end(),
                                [&](void* b) {
                                  const uintptr_t a = reinterpret_cast<uintptr_t>(b);
                                  return a >= start && a < end;
                                }),
                 free.end());
      if (auto carving = carving_.find(it->second.block);
          carving != carving_.end() && carving->second == start) {
        carving_.erase(carving);
      }
      mapped_ -= it->second.bytes;
      unmap.emplace_back(reinterpret_cast<void*>(start), it->second.bytes);
      it = slabs_.erase(it);
    }
  }
  for (const auto& [start, bytes] : unmap) kernels::UnmapHugePages(start, bytes);
}

int64_t BlockSlabs::mapped_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(mapped_);
}

int64_t BlockSlabs::taken_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(taken_);
}

}  // namespace attnserve::server

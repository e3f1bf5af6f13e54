#include "kernels/common/huge_page_buffer.h"

#include <ATen/ATen.h>
#include <sys/mman.h>

#include <cstdint>
#include <new>

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

}  // namespace

at::Tensor EmptyHugePageBuffer(at::IntArrayRef sizes, const at::TensorOptions& options) {
  int64_t elements = 1;
  for (const int64_t s : sizes) elements *= s;
  const int64_t bytes =
      elements * static_cast<int64_t>(c10::elementSize(c10::typeMetaToScalarType(options.dtype())));
  if (!options.device().is_cpu() || bytes < kHugePageBufferMinBytes) {
    return at::empty(sizes, options);
  }
  const size_t mapped = RoundUp(static_cast<size_t>(bytes), kPage);
  void* data = MapAligned(mapped);
  // Its whole huge pages are backed by huge pages, the part past the last one by ordinary pages.
  // Advice is only advice: where the kernel has no THP this fails and the pages are ordinary.
#ifdef MADV_HUGEPAGE
  madvise(data, mapped, MADV_HUGEPAGE);
#endif
  return at::from_blob(
      data, sizes, [mapped](void* p) { munmap(p, mapped); }, options);
}

}  // namespace attnserve::kernels

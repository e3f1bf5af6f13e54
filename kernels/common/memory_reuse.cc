#include "kernels/common/memory_reuse.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace attnserve::kernels {

bool KeepFreedMemoryForReuse(const MemoryReuseOptions& options) {
#if defined(__GLIBC__)
  // Setting either threshold also turns off glibc's dynamic threshold adjustment.
  const bool mmap_ok = mallopt(M_MMAP_THRESHOLD, static_cast<int>(options.mmap_threshold_bytes)) &&
                       (!options.never_mmap || mallopt(M_MMAP_MAX, 0));
  const bool trim_ok = mallopt(M_TRIM_THRESHOLD, static_cast<int>(options.trim_threshold_bytes));
  return mmap_ok && trim_ok;
#else
  (void)options;
  return false;
#endif
}

size_t FreeHeapBytes() {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  const struct mallinfo2 info = mallinfo2();
  return info.fordblks + info.fsmblks;
#else
  return 0;
#endif
}

bool ReturnFreedMemory() {
#if defined(__GLIBC__)
  return malloc_trim(0) != 0;
#else
  return false;
#endif
}

}  // namespace attnserve::kernels

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

}  // namespace attnserve::kernels

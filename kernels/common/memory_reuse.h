// Keeps freed heap memory in the process for the next allocation instead of handing it back to
// the kernel at once. A mixer call allocates and frees buffers of several MiB (projections,
// score tiles, block states); with glibc's defaults, buffers above its dynamic mmap threshold
// are mmap-ed and munmap-ed every call, so each call page-faults its memory in again, and on
// these VMs a fault costs ~45 µs under load: that made the linear mixer at L = 16384 take
// 0.5-1.7 s instead of 0.26 s (docs/benchmarks.md). Called once at the start of the server and
// the benchmark, before any threads start.
#pragma once

#include <cstddef>

namespace attnserve::kernels {

struct MemoryReuseOptions {
  // No allocation is served by its own mmap (glibc's M_MMAP_MAX = 0): every block comes from
  // the heap and goes back to it on free. Raising the mmap threshold alone is not enough: glibc
  // caps it at 32 MiB, and at L = 16384 the mixers' buffers are 32-64 MiB (a run at that length
  // was 3-5x slower with only the threshold raised: docs/benchmarks.md).
  bool never_mmap = true;
  // Without never_mmap: allocations at least this large are mmap-ed (and returned on free).
  size_t mmap_threshold_bytes = size_t{32} << 20;
  // Free memory at the top of the heap beyond this is returned to the kernel.
  size_t trim_threshold_bytes = size_t{512} << 20;
};

// Returns false when the C library refused a setting (non-glibc: nothing to do).
bool KeepFreedMemoryForReuse(const MemoryReuseOptions& options = {});

// What the policy above costs is freed memory that stays resident; these give it back when
// that is cheap (server/idle_memory_trimmer.h calls them when the server is idle, or when the
// free heap passes an operator's bound).
// Bytes of free heap memory the allocator holds (glibc's mallinfo2: free chunks of every arena
// plus the fast bins); 0 where unknown. Takes each arena's lock briefly.
size_t FreeHeapBytes();
// Hands free heap memory back to the kernel (glibc's malloc_trim(0): the top of each heap and
// the free pages inside it, by madvise). Takes each arena's lock while it works (milliseconds
// on a heap of GiB). Returns whether anything was released.
bool ReturnFreedMemory();

}  // namespace attnserve::kernels

// Large CPU tensors backed by transparent huge pages, for buffers that are written once into
// memory the process has not touched yet: a KV cache's new buffer (kernels/standard/kv_cache.h)
// and the copies the prefix state cache and the scheduler make of one (server/model/model.h).
//
// Why: a prefix-cache entry keeps the buffer its prompt filled, so the next prompt's cache
// cannot reuse it and is written into fresh memory; on these VMs each 4 KiB page costs a fault
// of 1-45 µs the first time it is touched (kernels/common/memory_reuse.h). A 4096-token miss on
// the default hybrid took ~2900 faults with the cache on against ~10 off
// (bench/prefix_cache_miss_bench.cc). Memory advised with MADV_HUGEPAGE faults in 2 MiB at a
// time where the kernel has huge pages to give (THP "always" or "madvise"; with "never", or
// no huge page free, it falls back to 4 KiB pages: the same memory, only slower to touch).
//
// How: its own anonymous mapping that starts on a 2 MiB boundary, its size rounded up to 4 KiB
// only (the part past its last whole huge page is in ordinary pages), unmapped when the tensor
// is freed. Out of the allocator's heap on purpose: long-lived multi-MiB caches that the prefix
// cache keeps and evicts in its own order would fragment the heap that a chunk's short-lived
// activations come from, and make those fault in fresh pages too.
//
// Cost: with THP `defrag=madvise` the kernel may compact memory synchronously at an advised
// fault. Measured here: a prefix-cache hit's 8 MB copy took 6-7 ms through this buffer against
// 8-9 ms as a heap clone (one run, loaded machine), but 15 ms once when every hit's copy was
// forced through it with its size rounded up to whole huge pages (issue #24). The rounding is not
// done for that reason.
//
// Mappings: one per buffer. The kernel's limit (vm.max_map_count, 65530 by default) is far above
// what the state budget and the prefix cache's bound allow in buffers of 2 MiB or more (8 GiB
// and 1 GiB by default: under 5,000); a mapping refused is std::bad_alloc, which the kernels'
// GuardTorch turns into a status.
//
// Reuse: a freed buffer's mapping is kept, already faulted in, in a pool of at most
// SetHugePageBufferPoolBytes bytes (the server's --kv_buffer_pool_bytes; oldest unmapped
// first), and the next buffer that fits in it (wasting at most a quarter plus one huge page)
// takes it instead of a fresh mapping. Why: sessions and prefix-cache hits come and go with
// KV caches of the same few sizes, and a fresh 8 MB mapping cost 1.2 ms of faults at best and
// 12-56 ms when the kernel compacted memory for its huge pages (bench/hit_probe.cc's copy,
// docs/benchmarks.md, issue #24); a reused one is a memcpy. The server's
// idle trim (server/idle_memory_trimmer.h) empties the pool with the heap's free memory.
//
// Contract: the result is a contiguous, uninitialised tensor of `sizes` with `options`, which
// owns its memory (back to the pool or unmapped when its last reference goes). Below
// kHugePageBufferMinBytes, or off the CPU, it is a plain at::empty. Thread-safe.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace attnserve::kernels {

// Buffers at least this large (a huge page) are mapped so. A smaller one would have no whole huge
// page, and a fresh mapping faults every page in, where the heap may hand back memory already in.
inline constexpr int64_t kHugePageBufferMinBytes = int64_t{2} << 20;

at::Tensor EmptyHugePageBuffer(at::IntArrayRef sizes, const at::TensorOptions& options);

// The pool's bound, until it changes; the default until then. 0 (or less): keep none (and
// unmap what is kept). Shrinks the pool to it at once.
inline constexpr int64_t kDefaultHugePageBufferPoolBytes = int64_t{256} << 20;
void SetHugePageBufferPoolBytes(int64_t bytes);

struct HugePageBufferPoolStats {
  int64_t bytes = 0;       // mapped bytes kept
  int64_t buffers = 0;     // mappings kept
  int64_t reused = 0;      // buffers served from the pool so far
  int64_t prefaulted = 0;  // buffers PrefaultHugePageBuffer put in it
};
HugePageBufferPoolStats HugePageBufferPool();

// Unmaps every mapping the pool keeps (and forgets the sizes to page in, below).
void ReleaseHugePageBufferPool();

// Maps one buffer of a size that a request since the last call found no buffer for, or took one
// of the buffers paged in here for (the oldest such request), faults it in page by page while
// `keep_going` holds, and puts it in the pool (within its bound); returns whether it did. For a
// thread that pages memory in while the server is idle (server/prefix_cache/prefaulted_blocks.h):
// a prefix-cache entry keeps its prompt's KV buffers, so while the cache grows every prompt's
// buffers are new memory, ~8 MB for a 4096-token prompt on the default hybrid: 15-25 ms of first
// touches on this VM, 8-15% of the prompt. A buffer paged in here and taken is replaced at the next
// idle time, so a growing cache's prompts keep finding theirs ready; a buffer a tensor gave back
// (an evicted entry's, a closed session's) is reuse and is not replaced.
bool PrefaultHugePageBuffer(const std::atomic<bool>& keep_going);

}  // namespace attnserve::kernels

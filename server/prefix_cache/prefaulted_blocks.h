// Memory for the prefix cache's entries, faulted in ahead of need by a thread that runs only
// when a core is idle.
//
// Why: while the cache grows (until it reaches --prefix_cache_bytes), every entry is new memory,
// and on these VMs a page the process has not touched costs a fault of 1-45 µs (the hypervisor
// backs it on first touch: kernels/common/memory_reuse.h). A 4096-token prompt on the default
// mamba caches 16 states of ~160 KB: ~2.6 MB, ~14 ms of faults on the scheduler's thread, while
// both cores' kernels wait for it. Every prompt distinct, that made a prompt 8-11% slower with the
// cache than without it, and 0-2% once the cache was full and its evictions' memory was reused
// (docs/benchmarks.md, issue #24). Here the faults are taken by a
// SCHED_IDLE thread, in time no other thread wants, and an entry's copy is a memcpy.
//
// How: blocks are heap allocations (64-byte aligned) of a size rounded up to 4 KiB. The filler
// thread keeps ready blocks, already written once, of the sizes last asked for (up to kSizes of
// them: states of one model have one size), up to `reserve_bytes` in all and never more than the
// room the cache has left (SetRoom): entries plus ready blocks stay within the cache's bound.
// A block freed (an entry evicted) goes back to the ready ones while they are under that, so a
// full cache reuses its evictions' memory as before. When none is ready (the cores were busy
// since the last prompt) a block is allocated on the caller's thread: what every entry cost
// before, no more.
//
// Threads: Take, SetRoom and stats from any thread; a block's tensor may be freed on any
// thread, also after this object is gone (the state it needs is shared with the deleters).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <thread>

namespace attnserve::server {

struct PrefaultedBlocksStats {
  int64_t ready_bytes = 0;  // blocks faulted in and waiting
  int64_t ready_blocks = 0;
  int64_t served_ready = 0;  // Take calls served from them
  int64_t served_fresh = 0;  // Take calls that allocated on the caller's thread
};

class PrefaultedBlocks {
 public:
  // Distinct block sizes kept ready at once (the most recently taken first); each gets an equal
  // share of the reserve.
  static constexpr int kSizes = 4;

  // reserve_bytes <= 0: nothing is kept ready and no thread runs (every Take allocates).
  explicit PrefaultedBlocks(int64_t reserve_bytes);
  ~PrefaultedBlocks();
  PrefaultedBlocks(const PrefaultedBlocks&) = delete;
  PrefaultedBlocks& operator=(const PrefaultedBlocks&) = delete;

  // A contiguous, uninitialised 1-D uint8 CPU tensor of `bytes` (> 0) bytes, 64-byte aligned,
  // which owns its block (back to the ready ones or freed when its last reference goes).
  // Throws std::bad_alloc when the heap refuses (as at::empty would).
  at::Tensor Take(int64_t bytes);

  // The bytes the ready blocks may hold from now on, at most reserve_bytes (the cache's bound
  // less its entries' bytes). Ready blocks beyond it are freed at once.
  void SetRoom(int64_t bytes);

  // Whether the blocks' user has no work now (true at first). The filler works only while it is
  // idle and stops within 16 pages when it is not: a fault taken while the user computes, even
  // on an idle core, delays the kernels' team (the core is lent to the filler when a worker
  // sleeps between parallel regions, and a worker woken there waits for the fault to end).
  void SetIdle(bool idle);

  // Frees the ready blocks and forgets the sizes taken: nothing is made ready again until the
  // next Take (the server's idle trim: an idle server holds only what it uses).
  void Release();

  PrefaultedBlocksStats stats() const;

 private:
  struct Core;
  std::shared_ptr<Core> core_;
  std::thread filler_;
};

}  // namespace attnserve::server

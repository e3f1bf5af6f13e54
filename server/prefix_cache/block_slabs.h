// The memory of the prefix cache's entry blocks (prefaulted_blocks.h): blocks of a few fixed
// sizes carved from slabs of transparent huge pages, and freed blocks kept for the next block of
// their size.
//
// Why: an entry's recurrent copy is a block of a fixed size per model (~160 KB on the default
// mamba, 16 a 4096-token prompt). From the heap, each one took fresh 4 KiB pages, and split the
// free chunks a prompt's activations reuse, so those faulted in fresh pages too: 1532 faults a
// prompt against 0 with the cache off, every prompt distinct, when no idle core pages them in
// ahead (bench/prefix_cache_miss_bench.cc). In slabs of huge pages, 2.6 MB of entries fault in
// 2 MiB at a time (on this VM 8 MB took 0.5 ms in huge pages, 25 ms in 4 KiB ones), and the
// heap keeps its memory for the activations.
//
// How: a slab is one MapHugePages mapping (kernels/common/huge_page_buffer.h) of whole huge
// pages holding at least 8 blocks of one size (so that at most an eighth of it is left over at
// its end); blocks are carved in order and, once given back, reused by the next Take of that
// size before anything new is carved. ReleaseFree unmaps the slabs none of whose blocks is
// taken (the server's idle trim). Slabs are never unmapped while a block of theirs is out.
//
// Threads: every method from any thread (a block is given back by the deleter of the tensor
// that views it, wherever that runs).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

namespace attnserve::server {

class BlockSlabs {
 public:
  BlockSlabs() = default;
  ~BlockSlabs();  // unmaps every slab: only once no block is out
  BlockSlabs(const BlockSlabs&) = delete;
  BlockSlabs& operator=(const BlockSlabs&) = delete;

  // A block of `size` bytes (a positive multiple of 4 KiB), 4 KiB-aligned and uninitialised (a
  // reused one holds what its last user wrote); std::bad_alloc when no slab can be mapped.
  void* Take(size_t size);
  // Gives back a block Take returned for `size`.
  void Give(void* block, size_t size);
  // Unmaps the slabs with no block out.
  void ReleaseFree();

  // Bytes mapped in slabs, and of those, in blocks out.
  int64_t mapped_bytes() const;
  int64_t taken_bytes() const;

 private:
  struct Slab {
    size_t bytes = 0;   // mapped
    size_t block = 0;   // the size of its blocks
    size_t carved = 0;  // bytes handed out at least once, from its start
    size_t taken = 0;   // blocks out
  };
  // The slab that holds `block`. Called with mu_ held.
  std::map<uintptr_t, Slab>::iterator SlabOf(const void* block);

  mutable std::mutex mu_;
  std::map<uintptr_t, Slab> slabs_;            // by start address
  std::map<size_t, std::vector<void*>> free_;  // blocks given back, by size
  std::map<size_t, uintptr_t> carving_;        // per size, the slab blocks are carved from
  size_t mapped_ = 0, taken_ = 0;
};

}  // namespace attnserve::server

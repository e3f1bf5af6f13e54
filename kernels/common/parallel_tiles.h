// The work split of the CPU kernels: tiles [0, tiles) (weight tiles or panels, or a scan's rows
// of channels) run on ATen's intra-op threads in chunks that the threads claim as they go.
// Used by the skinny and int8 products, the weight panels and the selective scan.
#pragma once

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>

namespace attnserve::kernels {

// Runs fn(begin, end, lane_end) over tiles [0, tiles) on ATen's intra-op threads, in chunks of
// at least `grain` tiles that the threads claim as they go (about 8 a thread), instead of one
// static share each: a thread slowed by the machine's other tenants, or woken late, no longer
// keeps the other waiting at the region's end (a one-row int8 step of mamba-130m: the calling
// thread waited 8.9% of its samples for the other's static half). A tile's result does not
// depend on which thread computes it.
//
// The chunks are dealt in lanes, one contiguous run of chunks per thread: a thread claims its
// own lane's chunks in order, then the other lanes' (front first). So a thread's next claim is
// almost always the tiles right after its current chunk, and `lane_end` (>= end; the end of the
// lane that `begin` belongs to) says how far the caller may prefetch ahead: the weight panels
// prefetch the panel after their chunk's last one, whose first pass otherwise waited on memory
// (one chunk of out_proj at 16 rows is 2 panels, of which the first was cold).
// Inside a parallel region, or with one thread, fn runs once over everything on the calling
// thread.
template <typename Fn>
void ParallelTileLanes(int64_t tiles, int64_t grain, const Fn& fn) {
  const int64_t threads = at::in_parallel_region() ? 1 : at::get_num_threads();
  const int64_t chunk =
      std::max<int64_t>(std::max<int64_t>(1, grain), (tiles + 8 * threads - 1) / (8 * threads));
  const int64_t chunks = (tiles + chunk - 1) / chunk;
  if (threads <= 1 || chunks <= 1) {
    if (tiles > 0) fn(int64_t{0}, tiles, tiles);
    return;
  }
  const int64_t lanes = std::min(threads, chunks);
  struct alignas(64) Lane {
    std::atomic<int64_t> next{0};
    int64_t end = 0;
  };
  std::unique_ptr<Lane[]> lane(new Lane[lanes]);
  for (int64_t l = 0; l < lanes; ++l) {
    lane[l].next.store(l * chunks / lanes, std::memory_order_relaxed);
    lane[l].end = (l + 1) * chunks / lanes;
  }
  at::parallel_for(0, lanes, 1, [&](int64_t own, int64_t) {
    for (int64_t k = 0; k < lanes; ++k) {
      Lane& from = lane[(own + k) % lanes];
      const int64_t lane_end = std::min(tiles, from.end * chunk);
      for (int64_t c = from.next.fetch_add(1); c < from.end; c = from.next.fetch_add(1)) {
        fn(c * chunk, std::min(tiles, (c + 1) * chunk), lane_end);
      }
    }
  });
}

// The same for callers that prefetch nothing past their chunk: fn(begin, end).
template <typename Fn>
void ParallelTiles(int64_t tiles, int64_t grain, const Fn& fn) {
  ParallelTileLanes(tiles, grain, [&](int64_t begin, int64_t end, int64_t) { fn(begin, end); });
}

}  // namespace attnserve::kernels

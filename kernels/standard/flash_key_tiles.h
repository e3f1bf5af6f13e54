// Which key tiles one block of queries visits in the CUDA prefill kernel
// (flash_attention_cuda.cu), as a host-and-device function so that the CPU tests check the
// plan (tests/unit/flash_key_tiles_test.cc) where no GPU runs the kernel.
//
// A block holds queries q0 .. q0 + rows - 1 (the last may be padding past seqlen_q); keys are
// walked in tiles of `tile`. Causal: query i sits at position seqlen_k - seqlen_q + i and sees
// keys up to it; with window > 0 only the last `window` of those, plus keys 0 .. sinks - 1.
// The walk: the sinks' tiles from 0, then the tiles from the one holding the first key the
// block's first query still sees, up to the one holding the last key its last query sees;
// without a window, every tile up to that one. Tiles are visited once each, in increasing
// order; every tile visited holds a key that some real query of the block sees.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define ATTNSERVE_HOST_DEVICE __host__ __device__
#else
#define ATTNSERVE_HOST_DEVICE
#endif

namespace attnserve::kernels::standard {

struct KeyTiles {
  int64_t first = 0;       // the first tile visited
  int64_t end = 0;         // one past the last
  int64_t sink_tiles = 0;  // tiles 0 .. sink_tiles - 1 hold sinks (windowed; else = end)
  int64_t band = 0;        // the window's first tile, where the walk goes after the sinks'

  ATTNSERVE_HOST_DEVICE int64_t next(int64_t t) const {
    return t + 1 == sink_tiles && band > t + 1 ? band : t + 1;
  }
};

ATTNSERVE_HOST_DEVICE inline KeyTiles PlanKeyTiles(int64_t seqlen_q, int64_t seqlen_k, bool causal,
                                                   int64_t window, int64_t sinks, int64_t q0,
                                                   int64_t rows, int64_t tile) {
  const int64_t offset = seqlen_k - seqlen_q;  // causal: query i is at position offset + i
  int64_t key_end = seqlen_k;
  if (causal && offset + q0 + rows < key_end) key_end = offset + q0 + rows;
  KeyTiles t;
  t.end = (key_end + tile - 1) / tile;
  if (window <= 0) {
    t.sink_tiles = t.end;
    t.band = t.end;
    return t;
  }
  const int64_t sink_tiles = (sinks + tile - 1) / tile;
  t.sink_tiles = sink_tiles < t.end ? sink_tiles : t.end;
  const int64_t band_start = offset + q0 - window + 1;  // may be negative
  const int64_t band = (band_start > 0 ? band_start : 0) / tile;
  t.band = band > t.sink_tiles ? band : t.sink_tiles;
  t.first = t.sink_tiles > 0 ? 0 : t.band;
  return t;
}

// Whether query row `row` (of seqlen_q) must not see key `col`: a key past seqlen_k; causal, a
// key after the query's position; windowed, a key `window` or more before it that is not a
// sink. The kernel masks exactly these scores.
ATTNSERVE_HOST_DEVICE inline bool KeyHidden(int64_t seqlen_q, int64_t seqlen_k, bool causal,
                                            int64_t window, int64_t sinks, int64_t row,
                                            int64_t col) {
  const int64_t position = seqlen_k - seqlen_q + row;
  return col >= seqlen_k || (causal && col > position) ||
         (window > 0 && col >= sinks && position - col >= window);
}

// Whether a query of the block may not see some key of the tile at k0 (a key past seqlen_k
// included): the kernel then masks the tile's scores one by one, otherwise it keeps them all.
// Conservative: true for some tiles whose keys every query sees, never false for one that
// hides a key from a real query.
ATTNSERVE_HOST_DEVICE inline bool TileHidesKeys(int64_t seqlen_q, int64_t seqlen_k, bool causal,
                                                int64_t window, int64_t sinks, int64_t q0,
                                                int64_t rows, int64_t k0, int64_t tile) {
  const int64_t offset = seqlen_k - seqlen_q;
  return k0 + tile > seqlen_k || (causal && k0 + tile - 1 > offset + q0) ||
         (window > 0 && k0 <= offset + q0 + rows - 1 - window && k0 + tile > sinks);
}

}  // namespace attnserve::kernels::standard

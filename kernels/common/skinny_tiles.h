// What the skinny products (skinny_gemm.cc, int8_gemm.cc) and the bfloat16 panels
// (panel_gemm.cc) share: bfloat16 pairs widened to float32, the tile shapes and their switch,
// the weight prefetch distance and the work per task (split by parallel_tiles.h).
// Internal to kernels/common; include only from .cc files.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/common/parallel_tiles.h"
#include "kernels/common/vector_math.h"

namespace attnserve::kernels::skinny {

using vec::Float16;
using vec::kLanes;
typedef uint32_t UInt32x16 __attribute__((vector_size(kLanes * sizeof(uint32_t))));

// The fixed horizontal sum of every tile shape: vector_math.h's.
using vec::Sum;

// out[i][l] = Sum(acc[i][l]); a tile of 9 to 16 sums side by side (vec::Sum16, the same bits).
template <int WR, int XR>
ATTNSERVE_VEC_INLINE void TileSums(const Float16 (&acc)[WR][XR], float (&out)[WR][XR]) {
  if constexpr (WR * XR > 8 && WR * XR <= 16) {
    Float16 lanes[16] = {};
    std::memcpy(lanes, acc, sizeof(acc));
    const Float16 sums = vec::Sum16(lanes);
    for (int i = 0; i < WR; ++i) {
      for (int l = 0; l < XR; ++l) out[i][l] = sums[i * XR + l];
    }
  } else {
    for (int i = 0; i < WR; ++i) {
      for (int l = 0; l < XR; ++l) out[i][l] = Sum(acc[i][l]);
    }
  }
}

// 16 uint32 words hold 32 bfloat16 weights, two per word: the even-indexed one in the low
// half. Each becomes a float32 by moving its bits to the top of the word.
ATTNSERVE_VEC_INLINE void LoadBf16Pairs(const uint16_t* p, Float16* even, Float16* odd) {
  UInt32x16 words;
  std::memcpy(&words, p, sizeof(words));
  const UInt32x16 lo = words << 16;
  const UInt32x16 hi = words & 0xFFFF0000u;
  std::memcpy(even, &lo, sizeof(*even));
  std::memcpy(odd, &hi, sizeof(*odd));
}

// How far ahead of the current column each weight row is prefetched where there is no next
// tile to prefetch (a task's last tile; rows shorter than one vector step). Rows are short
// (1.5-3 KB), too short for the hardware prefetcher to get ahead of them.
constexpr int64_t kPrefetchBytes = 512;

constexpr int kTileW = 4, kTileX = 4;

// While the current weight tile meets X's tiles of rows, the next weight tile of the task is
// prefetched into L2, spread evenly over every k-step of every pass. Measured on mamba-130m's
// matrices (bench/linear_bench.cc, docs/benchmarks.md "Skinny products fed a tile ahead"):
// - a batch of rows reads a weight tile once from memory and then from L1 for each further
//   tile of X; prefetching only within the tile, the products alternated a memory-bound pass
//   with compute-bound ones (the lm_head at 16 rows: 75 GFLOP/s, its weights at 9 GB/s);
// - one row streams at a prefetch distance of a whole tile (3-12 KB) instead of 512 bytes a
//   row: the lm_head's float32 weights at ~30 GB/s instead of ~20.
// `Step` is called once per k-step; with lines_per_step 0 it does nothing.
struct NextTilePrefetch {
  const char* next = nullptr;
  const char* end = nullptr;
  int lines_per_step = 0;

  ATTNSERVE_VEC_INLINE void Step() {
    for (int i = 0; i < lines_per_step; ++i) {
      if (next < end) __builtin_prefetch(next, 0, 2);
      next += 64;
    }
  }
};

// The prefetch for pass `pass` of `passes` over the current weight tile, whose k-loop runs
// `steps` times: the part of [next_begin, next_end) (the next weight tile's bytes; rows of a
// tile are contiguous) that this pass brings in.
inline NextTilePrefetch PassPrefetch(const void* next_begin, const void* next_end, int64_t pass,
                                     int64_t passes, int64_t steps) {
  NextTilePrefetch p;
  const char* begin = static_cast<const char*>(next_begin);
  const int64_t lines = (static_cast<const char*>(next_end) - begin + 63) / 64;
  const int64_t per_pass = (lines + passes - 1) / passes;
  if (per_pass <= 0 || steps <= 0) return p;
  p.next = begin + pass * per_pass * 64;
  p.end = std::min(static_cast<const char*>(next_end), p.next + per_pass * 64);
  p.lines_per_step = static_cast<int>((per_pass + steps - 1) / steps);
  return p;
}

// Calls Tile<wr, xr>(args...) for run-time sizes wr, xr in [1, 4] (every shape inlined).
#define ATTNSERVE_TILE_SWITCH(Tile, wr, xr, ...) \
  switch ((wr)*8 + (xr)) {                       \
    case 9:                                      \
      Tile<1, 1>(__VA_ARGS__);                   \
      break;                                     \
    case 10:                                     \
      Tile<1, 2>(__VA_ARGS__);                   \
      break;                                     \
    case 11:                                     \
      Tile<1, 3>(__VA_ARGS__);                   \
      break;                                     \
    case 12:                                     \
      Tile<1, 4>(__VA_ARGS__);                   \
      break;                                     \
    case 17:                                     \
      Tile<2, 1>(__VA_ARGS__);                   \
      break;                                     \
    case 18:                                     \
      Tile<2, 2>(__VA_ARGS__);                   \
      break;                                     \
    case 19:                                     \
      Tile<2, 3>(__VA_ARGS__);                   \
      break;                                     \
    case 20:                                     \
      Tile<2, 4>(__VA_ARGS__);                   \
      break;                                     \
    case 25:                                     \
      Tile<3, 1>(__VA_ARGS__);                   \
      break;                                     \
    case 26:                                     \
      Tile<3, 2>(__VA_ARGS__);                   \
      break;                                     \
    case 27:                                     \
      Tile<3, 3>(__VA_ARGS__);                   \
      break;                                     \
    case 28:                                     \
      Tile<3, 4>(__VA_ARGS__);                   \
      break;                                     \
    case 33:                                     \
      Tile<4, 1>(__VA_ARGS__);                   \
      break;                                     \
    case 34:                                     \
      Tile<4, 2>(__VA_ARGS__);                   \
      break;                                     \
    case 35:                                     \
      Tile<4, 3>(__VA_ARGS__);                   \
      break;                                     \
    case 36:                                     \
      Tile<4, 4>(__VA_ARGS__);                   \
      break;                                     \
  }

// Weight-row tiles per task: at least ~64 Ki multiply-adds, so that the smallest matrices of a
// one-row step (the default models' 256 x 256) stay on the calling thread while mamba-130m's
// x_proj and dt_proj (74-123 Ki, 0.3-0.5 MB of weights, bound by memory at one row) are split:
// on one thread they kept the other waiting (the second thread's idle share of a one-row
// mamba-130m step, bf16 activations: 10-12% → 6.5-6.7% against a floor of 256 Ki).
inline int64_t GrainTiles(int64_t in, int64_t rows) {
  const int64_t work_per_row = std::max<int64_t>(1, in * rows);
  const int64_t weight_rows = std::max<int64_t>(kTileW, (int64_t{1} << 16) / work_per_row);
  return (weight_rows + kTileW - 1) / kTileW;
}

}  // namespace attnserve::kernels::skinny

#include "kernels/common/skinny_gemm.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/common/skinny_tiles.h"
#include "kernels/common/vector_math.h"

namespace attnserve::kernels {
namespace {

using namespace skinny;  // NOLINT: this file is its other half
using vec::Float16;
using vec::kLanes;

// One tile: WR weight rows (w[i]) against XR rows of X, y[l][i] = w[i] · x[l]. Each pair has
// its own accumulator, summed over the columns in order, then its scalar tail: the same
// arithmetic for every tile shape.
template <int WR, int XR>
ATTNSERVE_VEC_INLINE void F32Tile(const float* const* w, const float* const* x, int64_t in,
                                  float* const* y, int64_t j, NextTilePrefetch pf) {
  const int64_t vec_in = in - in % kLanes;
  Float16 acc[WR][XR] = {};
  for (int64_t k = 0; k < vec_in; k += kLanes) {
    Float16 wv[WR], xv[XR];
    pf.Step();
    for (int i = 0; i < WR; ++i) {
      if (pf.lines_per_step == 0) __builtin_prefetch(w[i] + k + kPrefetchBytes / sizeof(float));
      wv[i] = vec::Load(w[i] + k);
    }
    for (int l = 0; l < XR; ++l) xv[l] = vec::Load(x[l] + k);
    for (int i = 0; i < WR; ++i) {
      for (int l = 0; l < XR; ++l) acc[i][l] = acc[i][l] + wv[i] * xv[l];
    }
  }
  float sums[WR][XR];
  TileSums(acc, sums);
  for (int i = 0; i < WR; ++i) {
    for (int l = 0; l < XR; ++l) {
      float s = sums[i][l];
      for (int64_t k = vec_in; k < in; ++k) s += w[i][k] * x[l][k];
      y[l][j + i] = s;
    }
  }
}

// Weight rows [begin, end) against X rows [0, rows): one task, compiled per CPU target.
ATTNSERVE_MULTIVERSION
void F32Rows(const float* w, int64_t begin, int64_t end, int64_t in, const float* x,
             int64_t x_stride, int64_t rows, float* y, int64_t out) {
  const int64_t passes = (rows + kTileX - 1) / kTileX, steps = in / kLanes;
  for (int64_t j = begin; j < end; j += kTileW) {
    const int wr = static_cast<int>(std::min<int64_t>(kTileW, end - j));
    const float* wp[kTileW] = {};
    for (int i = 0; i < wr; ++i) wp[i] = w + (j + i) * in;
    const float* next = w + (j + wr) * in;
    const float* next_end = w + std::min(end, j + wr + kTileW) * in;
    for (int64_t l = 0; l < rows; l += kTileX) {
      const int xr = static_cast<int>(std::min<int64_t>(kTileX, rows - l));
      const float* xp[kTileX] = {};
      float* yp[kTileX] = {};
      for (int r = 0; r < xr; ++r) {
        xp[r] = x + (l + r) * x_stride;
        yp[r] = y + (l + r) * out;
      }
      const NextTilePrefetch pf = PassPrefetch(next, next_end, l / kTileX, passes, steps);
      ATTNSERVE_TILE_SWITCH(F32Tile, wr, xr, wp, xp, in, yp, j, pf)
    }
  }
}

}  // namespace

void SkinnyGemmF32(const float* w, int64_t out, int64_t in, const float* x, int64_t x_stride,
                   int64_t rows, float* y) {
  ParallelTiles((out + kTileW - 1) / kTileW, GrainTiles(in, rows), [&](int64_t begin, int64_t end) {
    F32Rows(w, begin * kTileW, std::min(out, end * kTileW), in, x, x_stride, rows, y, out);
  });
}

}  // namespace attnserve::kernels

#include "kernels/common/bf16_dot_gemm.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "kernels/common/skinny_tiles.h"
#include "kernels/common/vector_math.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define ATTNSERVE_BF16DOT_X86 1
#define ATTNSERVE_BF16DOT_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))
#else
#define ATTNSERVE_BF16DOT_X86 0
#endif

namespace attnserve::kernels {
namespace {

using namespace skinny;  // NOLINT: the skinny products' shared pieces
using vec::Float16;

constexpr int64_t kChunkWords = 16;  // 32 bfloat16 columns: one vector of pairs

// One chunk of the portable definition: 32 columns of WR weight rows against XR rows of X
// (bfloat16 pairs, one uint32 word per pair).
template <int WR, int XR>
ATTNSERVE_VEC_INLINE void PortableChunk(const uint16_t* const* w, const uint32_t* const* x,
                                        Float16 (&acc)[WR][XR]) {
  Float16 we[WR], wo[WR];
  for (int i = 0; i < WR; ++i) LoadBf16Pairs(w[i], &we[i], &wo[i]);
  for (int l = 0; l < XR; ++l) {
    Float16 xe, xo;
    LoadBf16Pairs(reinterpret_cast<const uint16_t*>(x[l]), &xe, &xo);
    // Exact products: a fused multiply-add the compiler may form rounds the same.
    for (int i = 0; i < WR; ++i) acc[i][l] = (acc[i][l] + wo[i] * xo) + we[i] * xe;
  }
}

// The portable definition: one tile of WR weight rows against XR rows of X, `words` = in / 2
// pairs each.
template <int WR, int XR>
ATTNSERVE_VEC_INLINE void PortableTile(const uint16_t* const* w, const uint32_t* const* x,
                                       int64_t words, float* const* y, int64_t j,
                                       NextTilePrefetch pf) {
  Float16 acc[WR][XR] = {};
  const uint16_t* wc[WR];
  const uint32_t* xc[XR];
  const int64_t full = words - words % kChunkWords;
  for (int64_t k = 0; k < full; k += kChunkWords) {
    pf.Step();
    for (int i = 0; i < WR; ++i) {
      if (pf.lines_per_step == 0) {
        __builtin_prefetch(w[i] + 2 * k + kPrefetchBytes / sizeof(uint16_t));
      }
      wc[i] = w[i] + 2 * k;
    }
    for (int l = 0; l < XR; ++l) xc[l] = x[l] + k;
    PortableChunk<WR, XR>(wc, xc, acc);
  }
  if (full < words) {  // the last chunk, padded with zeros
    const int64_t rest = words - full;
    uint16_t wt[WR][2 * kChunkWords] = {};
    uint32_t xt[XR][kChunkWords] = {};
    for (int i = 0; i < WR; ++i) {
      std::memcpy(wt[i], w[i] + 2 * full, rest * 2 * sizeof(uint16_t));
      wc[i] = wt[i];
    }
    for (int l = 0; l < XR; ++l) {
      std::memcpy(xt[l], x[l] + full, rest * sizeof(uint32_t));
      xc[l] = xt[l];
    }
    PortableChunk<WR, XR>(wc, xc, acc);
  }
  float sums[WR][XR];
  TileSums(acc, sums);
  for (int i = 0; i < WR; ++i) {
    for (int l = 0; l < XR; ++l) y[l][j + i] = sums[i][l];
  }
}

#if ATTNSERVE_BF16DOT_X86
// The same tile on vdpbf16ps; the last chunk's missing pairs are masked loads' zeros.
template <int WR, int XR>
ATTNSERVE_BF16DOT_TARGET inline void HardwareTile(const uint16_t* const* w,
                                                  const uint32_t* const* x, int64_t words,
                                                  float* const* y, int64_t j, NextTilePrefetch pf) {
  __m512 acc[WR][XR];
  for (int i = 0; i < WR; ++i) {
    for (int l = 0; l < XR; ++l) acc[i][l] = _mm512_setzero_ps();
  }
  int64_t k = 0;
  for (; k + kChunkWords <= words; k += kChunkWords) {
    __m512i wv[WR];
    pf.Step();
    for (int i = 0; i < WR; ++i) {
      if (pf.lines_per_step == 0) {
        __builtin_prefetch(w[i] + 2 * k + kPrefetchBytes / sizeof(uint16_t));
      }
      wv[i] = _mm512_loadu_si512(w[i] + 2 * k);
    }
    for (int l = 0; l < XR; ++l) {
      const __m512i xv = _mm512_loadu_si512(x[l] + k);
      for (int i = 0; i < WR; ++i) {
        acc[i][l] = _mm512_dpbf16_ps(acc[i][l], (__m512bh)wv[i], (__m512bh)xv);
      }
    }
  }
  if (k < words) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (words - k)) - 1);
    __m512i wv[WR];
    for (int i = 0; i < WR; ++i) wv[i] = _mm512_maskz_loadu_epi32(mask, w[i] + 2 * k);
    for (int l = 0; l < XR; ++l) {
      const __m512i xv = _mm512_maskz_loadu_epi32(mask, x[l] + k);
      for (int i = 0; i < WR; ++i) {
        acc[i][l] = _mm512_dpbf16_ps(acc[i][l], (__m512bh)wv[i], (__m512bh)xv);
      }
    }
  }
  Float16 lanes[WR][XR];
  std::memcpy(lanes, acc, sizeof(lanes));
  float sums[WR][XR];
  TileSums(lanes, sums);
  for (int i = 0; i < WR; ++i) {
    for (int l = 0; l < XR; ++l) y[l][j + i] = sums[i][l];
  }
}
#endif  // ATTNSERVE_BF16DOT_X86

// Weight rows [begin, end) against every row of X: one task. `Tile` is a tile template's name.
#define ATTNSERVE_BF16DOT_ROWS(Tile)                                                       \
  const int64_t passes = (rows + kTileX - 1) / kTileX, steps = words / kChunkWords;        \
  for (int64_t j = begin; j < end; j += kTileW) {                                          \
    const int wr = static_cast<int>(std::min<int64_t>(kTileW, end - j));                   \
    const uint16_t* wp[kTileW] = {};                                                       \
    for (int i = 0; i < wr; ++i) wp[i] = w + (j + i) * 2 * words;                          \
    const uint16_t* next = w + (j + wr) * 2 * words;                                       \
    const uint16_t* next_end = w + std::min(end, j + wr + kTileW) * 2 * words;             \
    for (int64_t l = 0; l < rows; l += kTileX) {                                           \
      const int xr = static_cast<int>(std::min<int64_t>(kTileX, rows - l));                \
      const uint32_t* xp[kTileX] = {};                                                     \
      float* yp[kTileX] = {};                                                              \
      for (int r = 0; r < xr; ++r) {                                                       \
        xp[r] = x + (l + r) * words;                                                       \
        yp[r] = y + (l + r) * out;                                                         \
      }                                                                                    \
      const NextTilePrefetch pf = PassPrefetch(next, next_end, l / kTileX, passes, steps); \
      ATTNSERVE_TILE_SWITCH(Tile, wr, xr, wp, xp, words, yp, j, pf)                        \
    }                                                                                      \
  }

ATTNSERVE_MULTIVERSION
void PortableRows(const uint16_t* w, int64_t begin, int64_t end, int64_t words, const uint32_t* x,
                  int64_t rows, float* y, int64_t out){ATTNSERVE_BF16DOT_ROWS(PortableTile)}
#if ATTNSERVE_BF16DOT_X86
ATTNSERVE_BF16DOT_TARGET
    void HardwareRows(const uint16_t* w, int64_t begin, int64_t end, int64_t words,
                      const uint32_t* x, int64_t rows, float* y, int64_t out) {
  ATTNSERVE_BF16DOT_ROWS(HardwareTile)
}
#endif

// RoundToBf16 on 16 lanes (the bfloat16 bits in each lane's low half), branch-free.
ATTNSERVE_VEC_INLINE UInt32x16 RoundVector(Float16 v) {
  UInt32x16 bits;
  std::memcpy(&bits, &v, sizeof(bits));
  const UInt32x16 nan = (bits >> 16) | 0x40u;
  const UInt32x16 signed_zero = (bits >> 16) & 0x8000u;
  UInt32x16 r = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  r = (bits & 0x7F800000u) == 0 ? signed_zero : r;
  r = (bits & 0x7FFFFFFFu) > 0x7F800000u ? nan : r;
  return r;
}

Bf16DotIsa Resolve(Bf16DotIsa isa) {
  if (isa != Bf16DotIsa::kAuto) return isa;
  return Bf16DotIsaSupported(Bf16DotIsa::kAvx512Bf16) ? Bf16DotIsa::kAvx512Bf16
                                                      : Bf16DotIsa::kPortable;
}

}  // namespace

bool Bf16DotIsaSupported(Bf16DotIsa isa) {
  switch (isa) {
    case Bf16DotIsa::kAuto:
    case Bf16DotIsa::kPortable:
      return true;
    case Bf16DotIsa::kAvx512Bf16:
#if ATTNSERVE_BF16DOT_X86
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512bf16");
#else
      return false;
#endif
  }
  return false;
}

Bf16DotIsa Bf16DotIsaInUse() {
  static const Bf16DotIsa isa = Resolve(Bf16DotIsa::kAuto);
  return isa;
}

const char* Bf16DotIsaName(Bf16DotIsa isa) {
  switch (isa) {
    case Bf16DotIsa::kAuto:
      return "auto";
    case Bf16DotIsa::kAvx512Bf16:
      return "avx512-bf16";
    case Bf16DotIsa::kPortable:
      return "portable";
  }
  return "?";
}

uint16_t RoundToBf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  if ((bits & 0x7F800000u) == 0) return static_cast<uint16_t>((bits >> 16) & 0x8000);
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

ATTNSERVE_MULTIVERSION
void RoundRowsToBf16Pairs(const float* x, int64_t x_stride, int64_t rows, int64_t words,
                          uint32_t* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * x_stride;
    uint32_t* p = out + r * words;
    int64_t c = 0;
    for (; c + kLanes <= words; c += kLanes) {  // 32 floats -> 16 words
      const UInt32x16 lo = RoundVector(vec::Load(row + 2 * c));
      const UInt32x16 hi = RoundVector(vec::Load(row + 2 * c + kLanes));
      const UInt32x16 even = __builtin_shufflevector(lo, hi, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20,
                                                     22, 24, 26, 28, 30);
      const UInt32x16 odd = __builtin_shufflevector(lo, hi, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21,
                                                    23, 25, 27, 29, 31);
      const UInt32x16 words16 = even | (odd << 16);
      std::memcpy(p + c, &words16, sizeof(words16));
    }
    for (; c < words; ++c) {
      p[c] = RoundToBf16(row[2 * c]) | static_cast<uint32_t>(RoundToBf16(row[2 * c + 1])) << 16;
    }
  }
}

void SkinnyGemmBf16Dot(const uint16_t* w, int64_t out, int64_t in, const float* x, int64_t x_stride,
                       int64_t rows, float* y, Bf16DotIsa isa) {
  isa = isa == Bf16DotIsa::kAuto ? Bf16DotIsaInUse() : isa;
  const int64_t words = in / 2;
  // Not value-initialized: every word is written below (this runs on one thread, per call).
  std::unique_ptr<uint32_t[]> pairs(new uint32_t[static_cast<size_t>(rows * words)]);
  RoundRowsToBf16Pairs(x, x_stride, rows, words, pairs.get());
  const uint32_t* xp = pairs.get();
  skinny::ParallelTiles((out + kTileW - 1) / kTileW, GrainTiles(in, rows),
                        [&](int64_t begin, int64_t end) {
                          begin *= kTileW;
                          end = std::min(out, end * kTileW);
#if ATTNSERVE_BF16DOT_X86
                          if (isa == Bf16DotIsa::kAvx512Bf16) {
                            HardwareRows(w, begin, end, words, xp, rows, y, out);
                            return;
                          }
#endif
                          PortableRows(w, begin, end, words, xp, rows, y, out);
                        });
}

}  // namespace attnserve::kernels

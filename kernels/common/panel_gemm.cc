#include "kernels/common/panel_gemm.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>

#include "kernels/common/skinny_tiles.h"
#include "kernels/common/vector_math.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define ATTNSERVE_PANEL_BF16_X86 1
#define ATTNSERVE_PANEL_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))
#else
#define ATTNSERVE_PANEL_BF16_X86 0
#endif

namespace attnserve::kernels {
namespace {

using vec::Float16;
using vec::kLanes;

static_assert(kPanelOutputs == 2 * kLanes, "a panel's outputs are two vectors");

// Rows of X a panel meets at once: 6 x 2 float32 sums and 4 widened weight vectors fit
// AVX-512's 32 registers; AVX2's 16 hold 2 rows' (a 16-lane vector is two there).
constexpr int kMaxBlockRows = 6;

int BlockRows() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const int rows = __builtin_cpu_supports("avx512f") ? kMaxBlockRows : 2;
  return rows;
#else
  return 2;
#endif
}

int64_t Pairs(int64_t in) { return (in + 1) / 2; }

float Widen(uint32_t bits16) {
  const uint32_t wide = bits16 << 16;
  float out;
  std::memcpy(&out, &wide, sizeof(out));
  return out;
}

// Stores R rows' two vectors of sums (lo: outputs 0-15, hi: 16-31) at y[r], `valid` of them.
template <int R>
ATTNSERVE_VEC_INLINE void StoreRows(const Float16 (&lo)[R], const Float16 (&hi)[R], float* const* y,
                                    int valid) {
  for (int r = 0; r < R; ++r) {
    if (valid == kPanelOutputs) {
      vec::Store(y[r], lo[r]);
      vec::Store(y[r] + kLanes, hi[r]);
    } else {
      float sums[kPanelOutputs];
      vec::Store(sums, lo[r]);
      vec::Store(sums + kLanes, hi[r]);
      std::memcpy(y[r], sums, valid * sizeof(float));
    }
  }
}

// Pair c of a panel (its columns 2c and 2c + 1) as four vectors: the even column's outputs 0-15
// and 16-31 (e0, e1), the odd column's (o0, o1). Word: the panel's element type; kPairWords:
// elements a pair.
struct Bf16Pair {
  using Word = uint32_t;
  static constexpr int64_t kPairWords = kPanelOutputs;
  static ATTNSERVE_VEC_INLINE void Load(const Word* p, Float16* e0, Float16* o0, Float16* e1,
                                        Float16* o1) {
    skinny::LoadBf16Pairs(reinterpret_cast<const uint16_t*>(p), e0, o0);
    skinny::LoadBf16Pairs(reinterpret_cast<const uint16_t*>(p + kLanes), e1, o1);
  }
};
struct F32Pair {
  using Word = float;
  static constexpr int64_t kPairWords = 2 * kPanelOutputs;
  static ATTNSERVE_VEC_INLINE void Load(const Word* p, Float16* e0, Float16* o0, Float16* e1,
                                        Float16* o1) {
    *e0 = vec::Load(p);
    *e1 = vec::Load(p + kLanes);
    *o0 = vec::Load(p + kPanelOutputs);
    *o1 = vec::Load(p + kPanelOutputs + kLanes);
  }
};

// R rows of X against one panel: y[r][0 .. valid) = the header's sums. x[r] and y[r] point at
// row r's first column and at its first output of this panel. The even and the odd columns'
// sums are separate accumulators (4 a row), so that one row's chains of dependent FMAs are
// short enough for 2 rows to keep both FMA units busy.
template <typename Pair, int R>
ATTNSERVE_VEC_INLINE void PanelRows(const typename Pair::Word* panel, int64_t in,
                                    const float* const* x, float* const* y, int valid,
                                    skinny::NextTilePrefetch pf) {
  Float16 even[R][2] = {}, odd[R][2] = {};
  const int64_t full = in / 2;
  const typename Pair::Word* p = panel;
  for (int64_t c = 0; c < full; ++c, p += Pair::kPairWords) {
    pf.Step();
    Float16 e0, o0, e1, o1;
    Pair::Load(p, &e0, &o0, &e1, &o1);
    for (int r = 0; r < R; ++r) {
      const Float16 xe = vec::Broadcast(x[r][2 * c]), xo = vec::Broadcast(x[r][2 * c + 1]);
      even[r][0] = even[r][0] + e0 * xe;
      even[r][1] = even[r][1] + e1 * xe;
      odd[r][0] = odd[r][0] + o0 * xo;
      odd[r][1] = odd[r][1] + o1 * xo;
    }
  }
  if (in % 2 != 0) {  // the last column; the pair's other half is padding
    Float16 e0, o0, e1, o1;
    Pair::Load(p, &e0, &o0, &e1, &o1);
    for (int r = 0; r < R; ++r) {
      const Float16 xe = vec::Broadcast(x[r][in - 1]);
      even[r][0] = even[r][0] + e0 * xe;
      even[r][1] = even[r][1] + e1 * xe;
    }
  }
  Float16 lo[R], hi[R];
  for (int r = 0; r < R; ++r) {
    lo[r] = even[r][0] + odd[r][0];
    hi[r] = even[r][1] + odd[r][1];
  }
  StoreRows<R>(lo, hi, y, valid);
}

template <int R>
ATTNSERVE_VEC_INLINE void Bf16Rows(const uint32_t* panel, int64_t in, const float* const* x,
                                   float* const* y, int valid, skinny::NextTilePrefetch pf) {
  PanelRows<Bf16Pair, R>(panel, in, x, y, valid, pf);
}

template <int R>
ATTNSERVE_VEC_INLINE void F32Rows(const float* panel, int64_t in, const float* const* x,
                                  float* const* y, int valid, skinny::NextTilePrefetch pf) {
  PanelRows<F32Pair, R>(panel, in, x, y, valid, pf);
}

// bf16_dot_gemm.h's definition for R rows of X (bfloat16 pairs, one word each) against one
// panel, portably: each pair's products are exact in float32, so a fused multiply-add the
// compiler may form rounds as the separate addition does.
template <int R>
ATTNSERVE_VEC_INLINE void DotPortableRows(const uint32_t* panel, int64_t in,
                                          const uint32_t* const* x, float* const* y, int valid,
                                          skinny::NextTilePrefetch pf) {
  Float16 lo[R] = {}, hi[R] = {};
  const uint32_t* p = panel;
  for (int64_t c = 0; c < Pairs(in); ++c, p += kPanelOutputs) {
    pf.Step();
    Float16 e0, o0, e1, o1;
    skinny::LoadBf16Pairs(reinterpret_cast<const uint16_t*>(p), &e0, &o0);
    skinny::LoadBf16Pairs(reinterpret_cast<const uint16_t*>(p + kLanes), &e1, &o1);
    for (int r = 0; r < R; ++r) {
      const Float16 xe = vec::Broadcast(Widen(x[r][c] & 0xFFFFu));
      const Float16 xo = vec::Broadcast(Widen(x[r][c] >> 16));
      lo[r] = (lo[r] + o0 * xo) + e0 * xe;
      hi[r] = (hi[r] + o1 * xo) + e1 * xe;
    }
  }
  StoreRows<R>(lo, hi, y, valid);
}

#if ATTNSERVE_PANEL_BF16_X86
// The same on vdpbf16ps: one instruction a pair for 16 outputs.
template <int R>
ATTNSERVE_PANEL_BF16_TARGET inline void DotHardwareRows(const uint32_t* panel, int64_t in,
                                                        const uint32_t* const* x, float* const* y,
                                                        int valid, skinny::NextTilePrefetch pf) {
  __m512 lo[R], hi[R];
  for (int r = 0; r < R; ++r) lo[r] = hi[r] = _mm512_setzero_ps();
  const uint32_t* p = panel;
  for (int64_t c = 0; c < Pairs(in); ++c, p += kPanelOutputs) {
    pf.Step();
    const __m512bh w0 = (__m512bh)_mm512_loadu_si512(p);
    const __m512bh w1 = (__m512bh)_mm512_loadu_si512(p + kLanes);
    for (int r = 0; r < R; ++r) {
      const __m512bh xv = (__m512bh)_mm512_set1_epi32(static_cast<int>(x[r][c]));
      lo[r] = _mm512_dpbf16_ps(lo[r], w0, xv);
      hi[r] = _mm512_dpbf16_ps(hi[r], w1, xv);
    }
  }
  Float16 lo16[R], hi16[R];
  std::memcpy(lo16, lo, sizeof(lo16));
  std::memcpy(hi16, hi, sizeof(hi16));
  StoreRows<R>(lo16, hi16, y, valid);
}
#endif

// Panels [first, last) against every row of X (rows of XType, row stride x_stride), at most
// `block` rows at a time in blocks of near-equal sizes (8 rows as 4 + 4, not 6 + 2): one task.
// `Rows` is a row-block template's name.
// From two blocks of rows on, the next panel (up to `ahead`: ParallelTileLanes' lane end)
// is prefetched into L2 over the current panel's passes (skinny::PassPrefetch), as the int8 panels
// do: without it a panel's first pass waited on memory. mamba-130m in process, 16 rows, alternated
// runs: bf16 21.6-22.5 -> 18.7-19.1 ms a step, bf16 activations 17.5-18.1 -> 15.7-16.8, float32
// unchanged (22.0-22.4; the lm_head alone 1-3% faster); 64 rows unchanged within noise. One block
// streams its panels, which the hardware keeps up with.
#define ATTNSERVE_PANEL_RANGE(Rows, XType, pair_words)                                             \
  const int64_t panel_words = Pairs(in) * (pair_words);                                            \
  const int64_t blocks = (rows + block - 1) / block;                                               \
  for (int64_t q = first; q < last; ++q) {                                                         \
    const auto* panel = panels + q * panel_words;                                                  \
    const auto* next_end = panels + std::min(q + 2, ahead) * panel_words;                          \
    const int valid = static_cast<int>(std::min<int64_t>(kPanelOutputs, out - q * kPanelOutputs)); \
    for (int64_t b = 0, l = 0; b < blocks; ++b) {                                                  \
      const int n = static_cast<int>((rows - l) / (blocks - b));                                   \
      const XType* xp[kMaxBlockRows] = {};                                                         \
      float* yp[kMaxBlockRows] = {};                                                               \
      for (int r = 0; r < n; ++r) {                                                                \
        xp[r] = x + (l + r) * x_stride;                                                            \
        yp[r] = y + (l + r) * out + q * kPanelOutputs;                                             \
      }                                                                                            \
      const skinny::NextTilePrefetch pf =                                                          \
          blocks == 1 ? skinny::NextTilePrefetch{}                                                 \
                      : skinny::PassPrefetch(panel + panel_words, next_end, b, blocks, Pairs(in)); \
      switch (n) {                                                                                 \
        case 1:                                                                                    \
          Rows<1>(panel, in, xp, yp, valid, pf);                                                   \
          break;                                                                                   \
        case 2:                                                                                    \
          Rows<2>(panel, in, xp, yp, valid, pf);                                                   \
          break;                                                                                   \
        case 3:                                                                                    \
          Rows<3>(panel, in, xp, yp, valid, pf);                                                   \
          break;                                                                                   \
        case 4:                                                                                    \
          Rows<4>(panel, in, xp, yp, valid, pf);                                                   \
          break;                                                                                   \
        case 5:                                                                                    \
          Rows<5>(panel, in, xp, yp, valid, pf);                                                   \
          break;                                                                                   \
        case 6:                                                                                    \
          Rows<6>(panel, in, xp, yp, valid, pf);                                                   \
          break;                                                                                   \
      }                                                                                            \
      l += n;                                                                                      \
    }                                                                                              \
  }

ATTNSERVE_MULTIVERSION
void ExactRange(const uint32_t* panels, int64_t first, int64_t last, int64_t ahead, int64_t out,
                int64_t in, const float* x, int64_t x_stride, int64_t rows, float* y, int block) {
  ATTNSERVE_PANEL_RANGE(Bf16Rows, float, Bf16Pair::kPairWords);
}

ATTNSERVE_MULTIVERSION
void F32Range(const float* panels, int64_t first, int64_t last, int64_t ahead, int64_t out,
              int64_t in, const float* x, int64_t x_stride, int64_t rows, float* y, int block) {
  ATTNSERVE_PANEL_RANGE(F32Rows, float, F32Pair::kPairWords);
}

ATTNSERVE_MULTIVERSION
void DotPortableRange(const uint32_t* panels, int64_t first, int64_t last, int64_t ahead,
                      int64_t out, int64_t in, const uint32_t* x, int64_t x_stride, int64_t rows,
                      float* y, int block) {
  ATTNSERVE_PANEL_RANGE(DotPortableRows, uint32_t, kPanelOutputs);
}

#if ATTNSERVE_PANEL_BF16_X86
ATTNSERVE_PANEL_BF16_TARGET
void DotHardwareRange(const uint32_t* panels, int64_t first, int64_t last, int64_t ahead,
                      int64_t out, int64_t in, const uint32_t* x, int64_t x_stride, int64_t rows,
                      float* y, int block) {
  ATTNSERVE_PANEL_RANGE(DotHardwareRows, uint32_t, kPanelOutputs);
}
#endif

// Runs range(first, last, ahead) over the panels of an (out, in) matrix on ATen's intra-op threads,
// in tasks of at least ~64 Ki multiply-adds (as the skinny kernels: skinny::GrainTiles).
template <typename Range>
void ForPanels(int64_t out, int64_t in, int64_t rows, const Range& range) {
  const int64_t count = (out + kPanelOutputs - 1) / kPanelOutputs;
  const int64_t grain =
      (skinny::GrainTiles(in, rows) * skinny::kTileW + kPanelOutputs - 1) / kPanelOutputs;
  ParallelTileLanes(count, grain, range);
}

}  // namespace

int64_t Bf16PanelWords(int64_t out, int64_t in) {
  return (out + kPanelOutputs - 1) / kPanelOutputs * kPanelOutputs * Pairs(in);
}

void PackBf16Panels(const uint16_t* w, int64_t out, int64_t in, uint32_t* panels) {
  const int64_t pairs = Pairs(in), count = (out + kPanelOutputs - 1) / kPanelOutputs;
  at::parallel_for(0, count, 1, [&](int64_t begin, int64_t end) {
    for (int64_t q = begin; q < end; ++q) {
      uint32_t* panel = panels + q * pairs * kPanelOutputs;
      for (int64_t p = 0; p < pairs; ++p) {
        for (int64_t o = 0; o < kPanelOutputs; ++o) {
          const int64_t row = q * kPanelOutputs + o;
          uint32_t word = 0;
          if (row < out) {
            const uint16_t* src = w + row * in + 2 * p;
            word = src[0] | (2 * p + 1 < in ? static_cast<uint32_t>(src[1]) << 16 : 0u);
          }
          panel[p * kPanelOutputs + o] = word;
        }
      }
    }
  });
}

void UnpackBf16PanelRows(const uint32_t* panels, int64_t in, int64_t first, int64_t count,
                         float* dst) {
  const int64_t pairs = Pairs(in);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t row = first + i;
    const uint32_t* words =
        panels + row / kPanelOutputs * pairs * kPanelOutputs + row % kPanelOutputs;
    float* d = dst + i * in;
    for (int64_t p = 0; p < pairs; ++p) {
      const uint32_t word = words[p * kPanelOutputs];
      d[2 * p] = Widen(word & 0xFFFFu);
      if (2 * p + 1 < in) d[2 * p + 1] = Widen(word >> 16);
    }
  }
}

int64_t F32PanelFloats(int64_t out, int64_t in) { return 2 * Bf16PanelWords(out, in); }

void PackF32Panels(const float* w, int64_t out, int64_t in, float* panels) {
  const int64_t pairs = Pairs(in), count = (out + kPanelOutputs - 1) / kPanelOutputs;
  at::parallel_for(0, count, 1, [&](int64_t begin, int64_t end) {
    for (int64_t q = begin; q < end; ++q) {
      float* panel = panels + q * pairs * F32Pair::kPairWords;
      for (int64_t k = 0; k < 2 * pairs; ++k) {  // column k: element (k / 2, k % 2) of its pair
        float* dst = panel + k / 2 * F32Pair::kPairWords + k % 2 * kPanelOutputs;
        for (int64_t o = 0; o < kPanelOutputs; ++o) {
          const int64_t row = q * kPanelOutputs + o;
          dst[o] = row < out && k < in ? w[row * in + k] : 0.0f;
        }
      }
    }
  });
}

void UnpackF32PanelRows(const float* panels, int64_t in, int64_t first, int64_t count, float* dst) {
  const int64_t pairs = Pairs(in);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t row = first + i;
    const float* src =
        panels + row / kPanelOutputs * pairs * F32Pair::kPairWords + row % kPanelOutputs;
    for (int64_t k = 0; k < in; ++k) {
      dst[i * in + k] = src[k / 2 * F32Pair::kPairWords + k % 2 * kPanelOutputs];
    }
  }
}

void PanelGemmF32(const float* panels, int64_t out, int64_t in, const float* x, int64_t x_stride,
                  int64_t rows, float* y) {
  const int block = BlockRows();
  ForPanels(out, in, rows, [&](int64_t first, int64_t last, int64_t ahead) {
    F32Range(panels, first, last, ahead, out, in, x, x_stride, rows, y, block);
  });
}

void PanelGemmBf16(const uint32_t* panels, int64_t out, int64_t in, const float* x,
                   int64_t x_stride, int64_t rows, float* y) {
  const int block = BlockRows();
  ForPanels(out, in, rows, [&](int64_t first, int64_t last, int64_t ahead) {
    ExactRange(panels, first, last, ahead, out, in, x, x_stride, rows, y, block);
  });
}

void PanelGemmBf16Pairs(const uint32_t* panels, int64_t out, int64_t in, const uint32_t* x_pairs,
                        int64_t rows, float* y, bool hardware) {
  const int block = BlockRows();
  const int64_t words = Pairs(in);
  ForPanels(out, in, rows, [&](int64_t first, int64_t last, int64_t ahead) {
#if ATTNSERVE_PANEL_BF16_X86
    if (hardware) {
      DotHardwareRange(panels, first, last, ahead, out, in, x_pairs, words, rows, y, block);
      return;
    }
#endif
    (void)hardware;
    DotPortableRange(panels, first, last, ahead, out, in, x_pairs, words, rows, y, block);
  });
}

}  // namespace attnserve::kernels

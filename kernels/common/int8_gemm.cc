#include "kernels/common/int8_gemm.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/common/int8_gemm_internal.h"
#include "kernels/common/skinny_tiles.h"
#include "kernels/common/vector_math.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define ATTNSERVE_INT8_X86 1
#define ATTNSERVE_VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vnni")))
#else
#define ATTNSERVE_INT8_X86 0
#endif

namespace attnserve::kernels {
namespace {

using int8_detail::Avx2Rows;
using int8_detail::AvxVnniRows;
using int8_detail::GroupBlocks;
using int8_detail::Groups;
using int8_detail::QuantizedX;
using skinny::NextTilePrefetch;
using skinny::PassPrefetch;

// Calls visit(natural k, packed index) for each element of a row of `in` (a multiple of
// kInt8Block), in packed order.
template <typename Visit>
inline void ForEachPacked(int64_t in, Visit&& visit) {
  const int64_t nb = in / kInt8Block;
  for (int64_t g = 0; g * kInt8GroupBlocks < nb; ++g) {
    const int64_t gb = std::min(kInt8GroupBlocks, nb - g * kInt8GroupBlocks);
    int64_t index = g * kInt8GroupBlocks * kInt8Block;
    for (int64_t m = 0; m < kInt8Block / 4; ++m) {
      for (int64_t l = 0; l < gb; ++l) {
        const int64_t k = (g * kInt8GroupBlocks + l) * kInt8Block + 4 * m;
        for (int64_t e = 0; e < 4; ++e) visit(k + e, index++);
      }
    }
  }
}

// A natural-order row of q into its packed order, each byte xor `bias` (0x80: q + 128; 0 for
// X). The packed order moves whole 4-byte steps of a block (ForEachPacked), so a group is an
// 8 x gb transpose of 32-bit words. X's rows are packed on every product (a byte at a time, the
// packing and the blocks' sums took ~11% of the samples of a product whose time was X's
// quantization).
void PackRow(const int8_t* q, int64_t in, uint8_t bias, void* packed_row) {
  auto* packed = static_cast<uint8_t*>(packed_row);
  const int64_t nb = in / kInt8Block, words_per_block = kInt8Block / 4;
  for (int64_t g = 0; g * kInt8GroupBlocks < nb; ++g) {
    const int64_t gb = std::min(kInt8GroupBlocks, nb - g * kInt8GroupBlocks);
    const int64_t base = g * kInt8GroupBlocks * kInt8Block;
    for (int64_t m = 0; m < words_per_block; ++m) {
      for (int64_t l = 0; l < gb; ++l) {
        std::memcpy(packed + base + (m * gb + l) * 4, q + base + (l * words_per_block + m) * 4, 4);
      }
    }
  }
  if (bias != 0) {
    for (int64_t k = 0; k < in; ++k) packed[k] ^= bias;
  }
}

// amax / 127 and round(v / d) clamped to [-127, 127] (never -128: the AVX2 path negates), the
// same plain float arithmetic in every build of this file.
void QuantizeBlock(const float* v, int64_t n, int8_t* q, float* d_out) {
  float amax = 0;
  for (int64_t k = 0; k < n; ++k) amax = std::max(amax, std::fabs(v[k]));
  const float d = amax / 127.0f;
  const float id = d > 0 ? 1.0f / d : 0.0f;
  for (int64_t k = 0; k < n; ++k) {
    float s = std::round(v[k] * id);
    s = s > 127.0f ? 127.0f : (s < -127.0f ? -127.0f : s);
    q[k] = static_cast<int8_t>(s == s ? s : 0.0f);
  }
  *d_out = d;
}

// The scale that fits a block's q best in least squares, d = Σ v q / Σ q² (the refit of
// llama.cpp's k-quants' make_qx_quants): never a larger squared error than amax / 127 for the
// same q, at no cost to the products. Kept only where it is finite and positive (an all-zero
// block, or one with a NaN or an infinity, keeps QuantizeBlock's). The products v q are exact
// in float64 (24 + 7 bits), so a fused multiply-add gives the same bits as a multiply and an
// add; a block of kInt8Block sums them in a fixed tree (i + 16, i + 8, ...), so that the scalar
// and the vector quantizers, which both call this, agree bit for bit.
inline void RefitScale(const float* v, int64_t n, const int8_t* q, float* d_out) {
  double vq = 0, qq = 0;
  if (n == kInt8Block) {
    double t[kInt8Block];
    int32_t u = 0;
    for (int64_t k = 0; k < kInt8Block; ++k) {
      t[k] = static_cast<double>(v[k]) * q[k];
      u += int32_t{q[k]} * q[k];
    }
    for (int64_t h = kInt8Block / 2; h >= 1; h /= 2) {
      for (int64_t i = 0; i < h; ++i) t[i] += t[i + h];
    }
    vq = t[0];
    qq = u;
  } else {
    for (int64_t k = 0; k < n; ++k) {
      vq += static_cast<double>(v[k]) * q[k];
      qq += static_cast<double>(q[k]) * q[k];
    }
  }
  if (qq <= 0) return;
  const float fit = static_cast<float>(vq / qq);
  if (std::isfinite(fit) && fit > 0) *d_out = fit;
}

// QuantizeBlock, then RefitScale: every quantized block, weights' and activations'.
void QuantizeFittedBlock(const float* v, int64_t n, int8_t* q, float* d_out) {
  QuantizeBlock(v, n, q, d_out);
  RefitScale(v, n, q, d_out);
}

// The amax of one block of kInt8Block (32) floats, ignoring NaNs as std::max does.
ATTNSERVE_VEC_INLINE float BlockAmax(const float* p) {
  using vec::Float16;
  const Float16 lo = vec::Load(p), hi = vec::Load(p + vec::kLanes);
  const Float16 alo = lo < 0 ? -lo : lo, ahi = hi < 0 ? -hi : hi;
  Float16 m = alo < ahi ? ahi : alo;
  // std::max(amax, |v|) in order: a NaN never wins, and max is exact, so any order agrees.
  m = m == m ? m : (alo == alo ? alo : (ahi == ahi ? ahi : Float16{}));
  // Then the lanes' max in a tree (max is exact, so any order agrees; -0 lanes end as +0 as
  // std::max(0, -0) gives).
  vec::Float8 m8 = __builtin_shufflevector(m, m, 0, 1, 2, 3, 4, 5, 6, 7);
  const vec::Float8 m8b = __builtin_shufflevector(m, m, 8, 9, 10, 11, 12, 13, 14, 15);
  m8 = m8 < m8b ? m8b : m8;
  vec::Float4 m4 = __builtin_shufflevector(m8, m8, 0, 1, 2, 3);
  const vec::Float4 m4b = __builtin_shufflevector(m8, m8, 4, 5, 6, 7);
  m4 = m4 < m4b ? m4b : m4;
  return std::max(0.0f, std::max(std::max(m4[0], m4[1]), std::max(m4[2], m4[3])));
}

// One block's q = round(v · id) clamped to [-127, 127] (a NaN product to 0), and RefitScale's
// two sums: vq = Σ v q in float64 in its tree, qq = Σ q² (exact).
ATTNSERVE_VEC_INLINE void QuantizeBlockWith(const float* p, float id, int8_t* q, double* vq,
                                            int32_t* qq) {
  using vec::Float16;
  using vec::Int16;
  typedef double Double8 __attribute__((vector_size(8 * sizeof(double))));
  typedef int8_t Byte8 __attribute__((vector_size(8)));
  typedef int8_t Byte16 __attribute__((vector_size(16)));
  Int16 squares{};
  for (int h = 0; h < 2; ++h) {
    Float16 s = vec::Load(p + h * vec::kLanes) * id;
    // Beyond ±128 (an infinite 1/d) the clamp below gives ±127 as round() then the clamp do.
    s = s > 128.0f ? Float16{} + 128.0f : s;
    s = s < -128.0f ? Float16{} - 128.0f : s;
    const Float16 safe = s == s ? s : Float16{};
    Int16 i = __builtin_convertvector(safe, Int16);
    const Float16 frac = safe - __builtin_convertvector(i, Float16);
    i += frac >= 0.5f ? Int16{} + 1 : Int16{};
    i -= frac <= -0.5f ? Int16{} + 1 : Int16{};
    i = i > 127 ? Int16{} + 127 : i;
    i = i < -127 ? Int16{} - 127 : i;
    const Byte16 bytes = __builtin_convertvector(i, Byte16);  // exact: |i| <= 127
    std::memcpy(q + h * vec::kLanes, &bytes, sizeof bytes);
    squares += i * i;
  }
  // RefitScale's sums as vectors: the same exact float64 products and the same tree of
  // additions (i + 16, i + 8, then i + 4, i + 2, i + 1), so the same bits.
  Double8 t[4];
  for (int j = 0; j < 4; ++j) {
    vec::Float8 f;
    Byte8 qj;
    std::memcpy(&f, p + 8 * j, sizeof f);
    std::memcpy(&qj, q + 8 * j, sizeof qj);
    t[j] = __builtin_convertvector(f, Double8) * __builtin_convertvector(qj, Double8);
  }
  t[0] += t[2];
  t[1] += t[3];
  t[0] += t[1];
  // Then i + 4, i + 2, i + 1 in registers.
  typedef double Double4 __attribute__((vector_size(4 * sizeof(double))));
  typedef double Double2 __attribute__((vector_size(2 * sizeof(double))));
  const Double4 a4 = __builtin_shufflevector(t[0], t[0], 0, 1, 2, 3) +
                     __builtin_shufflevector(t[0], t[0], 4, 5, 6, 7);
  const Double2 a2 = __builtin_shufflevector(a4, a4, 0, 1) + __builtin_shufflevector(a4, a4, 2, 3);
  *vq = a2[0] + a2[1];
  // Σ q² is exact in any order.
  typedef int32_t Int8x __attribute__((vector_size(8 * sizeof(int32_t))));
  typedef int32_t Int4x __attribute__((vector_size(4 * sizeof(int32_t))));
  const Int8x s8 = __builtin_shufflevector(squares, squares, 0, 1, 2, 3, 4, 5, 6, 7) +
                   __builtin_shufflevector(squares, squares, 8, 9, 10, 11, 12, 13, 14, 15);
  const Int4x s4 =
      __builtin_shufflevector(s8, s8, 0, 1, 2, 3) + __builtin_shufflevector(s8, s8, 4, 5, 6, 7);
  *qq = (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

// QuantizeFittedBlock for blocks of kInt8Block (32) elements as vector code: the same bits.
// round() is trunc() plus a carry for fractions of at least one half (the fraction s - trunc(s)
// is exact for |s| < 2^23). Sixteen blocks at a time, so that their scales' divisions (amax /
// 127, 1 / d, the refit's Σ v q / Σ q²) are three vector divisions, not 48 scalar ones in each
// block's chain of dependent steps: IEEE division gives the same bits either way.
ATTNSERVE_MULTIVERSION
void QuantizeBlocks32(const float* v, int64_t blocks, int8_t* q, float* d_out) {
  using vec::Float16;
  static_assert(kInt8Block == 2 * vec::kLanes, "two vectors a block");
  typedef double Double8 __attribute__((vector_size(8 * sizeof(double))));
  typedef int64_t Long8 __attribute__((vector_size(8 * sizeof(int64_t))));
  for (int64_t b0 = 0; b0 < blocks; b0 += vec::kLanes) {
    const int n = static_cast<int>(std::min<int64_t>(vec::kLanes, blocks - b0));
    Float16 amax{};
    for (int i = 0; i < n; ++i) amax[i] = BlockAmax(v + (b0 + i) * kInt8Block);
    const Float16 d = amax / 127.0f;
    const Float16 id = d > 0 ? 1.0f / d : Float16{};
    alignas(64) double vq[vec::kLanes] = {};
    alignas(64) int32_t qq[vec::kLanes] = {};
    for (int i = 0; i < n; ++i) {
      QuantizeBlockWith(v + (b0 + i) * kInt8Block, id[i], q + (b0 + i) * kInt8Block, &vq[i],
                        &qq[i]);
    }
    // RefitScale: fit = Σ v q / Σ q², kept where Σ q² > 0 and fit is finite and positive.
    for (int half = 0; half < 2 && 8 * half < n; ++half) {
      Double8 num, den;
      Long8 wide;
      std::memcpy(&num, vq + 8 * half, sizeof num);
      for (int k = 0; k < 8; ++k) wide[k] = qq[8 * half + k];
      den = __builtin_convertvector(wide, Double8);
      const Double8 safe_den = wide > 0 ? den : Double8{} + 1.0;
      const vec::Float8 fit = __builtin_convertvector(num / safe_den, vec::Float8);
      for (int k = 0; k < 8 && 8 * half + k < n; ++k) {
        const int i = 8 * half + k;
        d_out[b0 + i] = qq[i] > 0 && std::isfinite(fit[k]) && fit[k] > 0 ? fit[k] : d[i];
      }
    }
  }
}

// Rows are split across the intra-op threads from 8 Ki elements a task (a 16-row batch of
// in_proj's 768: two tasks): at 64 rows the quantization on one thread was 4% of a step's
// samples with the other thread waiting.
QuantizedX QuantizeX(const float* x, int64_t x_stride, int64_t rows, int64_t in) {
  QuantizedX qx;
  qx.in = in;
  const int64_t blocks = in / kInt8Block;
  qx.q.resize(rows * in);
  qx.d.resize(rows * blocks);
  qx.c.resize(rows * blocks);
  const int64_t grain = std::max<int64_t>(1, (int64_t{8} << 10) / in);
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    std::vector<int8_t> natural(in);
    for (int64_t r = begin; r < end; ++r) {
      QuantizeBlocksInt8(x + r * x_stride, blocks, natural.data(), &qx.d[r * blocks]);
      PackRow(natural.data(), in, 0, qx.q.data() + r * in);
      int32_t* c = qx.c.data() + r * blocks;
      for (int64_t b = 0; b < blocks; ++b) {
        int32_t sum = 0;
        for (int64_t k = 0; k < kInt8Block; ++k) sum += natural[b * kInt8Block + k];
        c[b] = -128 * sum;
      }
    }
  });
  return qx;
}

// The definition itself, one (weight row, X row) pair at a time.
void ScalarRows(const uint8_t* w, const float* ws, int64_t begin, int64_t end, int64_t in,
                const QuantizedX& x, int64_t rows, float* y, int64_t out) {
  const int64_t nb = in / kInt8Block;
  for (int64_t j = begin; j < end; ++j) {
    const uint8_t* wq = w + j * in;
    const float* wd = ws + j * nb;
    for (int64_t r = 0; r < rows; ++r) {
      const int8_t* xq = x.q_row(r);
      const float* xd = x.d_row(r);
      float acc[16] = {};
      for (int64_t g = 0; g < Groups(nb); ++g) {
        const int gb = GroupBlocks(g, nb);
        const int64_t base = g * kInt8GroupBlocks * kInt8Block;
        for (int l = 0; l < 16; ++l) {
          int32_t p = 0;
          float s = 0;
          if (l < gb) {
            for (int64_t m = 0; m < kInt8Block / 4; ++m) {
              const int64_t k = base + m * 4 * gb + 4 * l;
              for (int e = 0; e < 4; ++e) {
                p += (int32_t{wq[k + e]} - 128) * int32_t{xq[k + e]};
              }
            }
            s = wd[g * kInt8GroupBlocks + l] * xd[g * kInt8GroupBlocks + l];
          }
          acc[l] = std::fma(static_cast<float>(p), s, acc[l]);
        }
      }
      y[r * out + j] = vec::Sum(vec::Load(acc));
    }
  }
}

#if ATTNSERVE_INT8_X86

// acc += vpdpbusd(w unsigned, x signed), in place: with the intrinsic GCC 12 copied each
// accumulator to another register and back around every vpdpbusd of a tile (two moves per
// product).
ATTNSERVE_VNNI_TARGET inline void DotBytes(__m512i& acc, __m512i w, __m512i x) {
  asm("vpdpbusd %[x], %[w], %[acc]" : [acc] "+v"(acc) : [w] "v"(w), [x] "v"(x));
}

// WR weight rows against XR rows of X, one group of up to 16 blocks at a time: 8 steps of
// vpdpbusd into int32 block sums (started at X's c; 4 steps of two for a group of at most 8
// blocks), then one convert, scale product and FMA per group. A short group's bytes and lanes
// past it are masked to zero. Integer sums are exact, so any grouping of the steps gives the
// header's bits.
template <int WR, int XR>
ATTNSERVE_VNNI_TARGET inline void VnniTile(const uint8_t* const* wq, const float* const* wd,
                                           const QuantizedX& x, int64_t l0, int64_t nb, float* y,
                                           int64_t out, int64_t j, NextTilePrefetch pf) {
  // The float sums stay in registers next to the int32 sums: WR x XR of each, the weight
  // vectors and X's vector within the 32 registers for the 4 x 3 tile (keeping them in memory
  // for a 4 x 4 tile cost more than its one fewer weight load a step saves: mamba-130m's rows
  // have only 1-3 groups, so a group's conversion is a large part of a tile).
  __m512 acc[WR][XR];
  for (int i = 0; i < WR; ++i) {
    for (int l = 0; l < XR; ++l) acc[i][l] = _mm512_setzero_ps();
  }
  const int8_t* xq[XR];
  const int32_t* xc[XR];
  const float* xd[XR];
  for (int l = 0; l < XR; ++l) {
    xq[l] = x.q_row(l0 + l);
    xc[l] = x.c_row(l0 + l);
    xd[l] = x.d_row(l0 + l);
  }
  for (int64_t g = 0; g < Groups(nb); ++g) {
    const int gb = GroupBlocks(g, nb);
    const __mmask16 lanes = static_cast<__mmask16>((uint32_t{1} << gb) - 1);
    const int64_t base = g * kInt8GroupBlocks * kInt8Block, first_block = g * kInt8GroupBlocks;
    __m512i p[WR][XR];
    for (int l = 0; l < XR; ++l) {
      const __m512i c = _mm512_maskz_loadu_epi32(lanes, xc[l] + first_block);
      for (int i = 0; i < WR; ++i) p[i][l] = c;
    }
    // A group of at most 8 blocks takes two of its steps a vector (they are adjacent in the
    // packed row): lanes gb .. 2 gb - 1 sum the odd steps, added to lanes 0 .. gb - 1 after.
    const bool paired = gb <= kInt8GroupBlocks / 2;
    const int64_t step_length = (paired ? 8 : 4) * gb;  // bytes, at most 64
    const __mmask64 step_bytes =
        step_length == 64 ? ~__mmask64{0} : (__mmask64{1} << step_length) - 1;
    const int64_t vector_steps = paired ? kInt8Block / 8 : kInt8Block / 4;
    for (int64_t m = 0; m < vector_steps; ++m) {
      const int64_t k = base + m * step_length;
      __m512i wv[WR];
      pf.Step();
      for (int i = 0; i < WR; ++i) {
        if (pf.lines_per_step == 0) __builtin_prefetch(wq[i] + k + skinny::kPrefetchBytes);
        wv[i] = _mm512_maskz_loadu_epi8(step_bytes, wq[i] + k);
      }
      for (int l = 0; l < XR; ++l) {
        const __m512i xv = _mm512_maskz_loadu_epi8(step_bytes, xq[l] + k);
        for (int i = 0; i < WR; ++i) DotBytes(p[i][l], wv[i], xv);
      }
    }
    if (paired) {
      const __m512i odd =
          _mm512_add_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                           _mm512_set1_epi32(gb));
      for (int i = 0; i < WR; ++i) {
        for (int l = 0; l < XR; ++l) {
          p[i][l] = _mm512_maskz_add_epi32(lanes, p[i][l],
                                           _mm512_maskz_permutexvar_epi32(lanes, odd, p[i][l]));
        }
      }
    }
    __m512 ws[WR];
    for (int i = 0; i < WR; ++i) ws[i] = _mm512_maskz_loadu_ps(lanes, wd[i] + first_block);
    for (int l = 0; l < XR; ++l) {
      const __m512 xs = _mm512_maskz_loadu_ps(lanes, xd[l] + first_block);
      for (int i = 0; i < WR; ++i) {
        // The zero-masked convert is vcvtdq2ps (the unmasked intrinsic's undefined source trips
        // GCC 12's -Wmaybe-uninitialized here).
        const __m512 pf32 = _mm512_maskz_cvtepi32_ps(~__mmask16{0}, p[i][l]);
        acc[i][l] = _mm512_fmadd_ps(pf32, _mm512_mul_ps(ws[i], xs), acc[i][l]);
      }
    }
  }
  // vec::Sum's tree, the tile's accumulators side by side.
  vec::Float16 sum_lanes[WR][XR];
  std::memcpy(sum_lanes, acc, sizeof(sum_lanes));
  float sums[WR][XR];
  skinny::TileSums(sum_lanes, sums);
  for (int i = 0; i < WR; ++i) {
    for (int l = 0; l < XR; ++l) y[(l0 + l) * out + j + i] = sums[i][l];
  }
}

constexpr int kTileW = 4, kTileX = 3;

// `next`, `next_end`: the next weight tile's bytes, prefetched while this one meets X's tiles
// (skinny_tiles.h's NextTilePrefetch).
template <int WR>
ATTNSERVE_VNNI_TARGET void VnniTileRows(const uint8_t* const* wq, const float* const* wd,
                                        const QuantizedX& x, int64_t rows, int64_t nb, float* y,
                                        int64_t out, int64_t j, const uint8_t* next,
                                        const uint8_t* next_end) {
  // Vector steps a pass: 8 a group, 4 for a last group of at most 8 blocks (VnniTile).
  const int64_t last = GroupBlocks(Groups(nb) - 1, nb);
  const int64_t passes = (rows + kTileX - 1) / kTileX,
                steps = Groups(nb) * (kInt8Block / 4) - (last <= kInt8GroupBlocks / 2 ? 4 : 0);
  auto pass_prefetch = [&](int64_t l) {
    return PassPrefetch(next, next_end, l / kTileX, passes, steps);
  };
  int64_t l = 0;
  for (; l + kTileX <= rows; l += kTileX) {
    VnniTile<WR, kTileX>(wq, wd, x, l, nb, y, out, j, pass_prefetch(l));
  }
  static_assert(kTileX == 3, "the remainder's tiles below");
  switch (rows - l) {
    case 2:
      VnniTile<WR, 2>(wq, wd, x, l, nb, y, out, j, pass_prefetch(l));
      break;
    case 1:
      VnniTile<WR, 1>(wq, wd, x, l, nb, y, out, j, pass_prefetch(l));
      break;
  }
}

ATTNSERVE_VNNI_TARGET
void VnniRows(const uint8_t* w, const float* ws, int64_t begin, int64_t end, int64_t in,
              const QuantizedX& x, int64_t rows, float* y, int64_t out) {
  const int64_t nb = in / kInt8Block;
  for (int64_t j = begin; j < end; j += kTileW) {
    const int wr = static_cast<int>(std::min<int64_t>(kTileW, end - j));
    const uint8_t* wq[kTileW] = {};
    const float* wd[kTileW] = {};
    for (int i = 0; i < wr; ++i) {
      wq[i] = w + (j + i) * in;
      wd[i] = ws + (j + i) * nb;
    }
    const uint8_t* next = w + (j + wr) * in;
    const uint8_t* next_end = w + std::min(end, j + wr + kTileW) * in;
    switch (wr) {
      case 4:
        VnniTileRows<4>(wq, wd, x, rows, nb, y, out, j, next, next_end);
        break;
      case 3:
        VnniTileRows<3>(wq, wd, x, rows, nb, y, out, j, next, next_end);
        break;
      case 2:
        VnniTileRows<2>(wq, wd, x, rows, nb, y, out, j, next, next_end);
        break;
      case 1:
        VnniTileRows<1>(wq, wd, x, rows, nb, y, out, j, next, next_end);
        break;
    }
  }
}

#endif  // ATTNSERVE_INT8_X86

Int8Isa Resolve(Int8Isa isa) {
  if (isa != Int8Isa::kAuto) return isa;
  if (Int8IsaSupported(Int8Isa::kAvx512Vnni)) return Int8Isa::kAvx512Vnni;
  if (Int8IsaSupported(Int8Isa::kAvxVnni)) return Int8Isa::kAvxVnni;
  if (Int8IsaSupported(Int8Isa::kAvx2)) return Int8Isa::kAvx2;
  return Int8Isa::kScalar;
}

}  // namespace

bool Int8IsaSupported(Int8Isa isa) {
  switch (isa) {
    case Int8Isa::kAuto:
    case Int8Isa::kScalar:
      return true;
#if ATTNSERVE_INT8_X86
    case Int8Isa::kAvx512Vnni:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vnni");
    case Int8Isa::kAvxVnni:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("avxvnni");
    case Int8Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    default:
      return false;
#endif
  }
  return false;
}

Int8Isa Int8IsaInUse() {
  static const Int8Isa isa = Resolve(Int8Isa::kAuto);
  return isa;
}

const char* Int8IsaName(Int8Isa isa) {
  switch (isa) {
    case Int8Isa::kAuto:
      return "auto";
    case Int8Isa::kAvx512Vnni:
      return "avx512-vnni";
    case Int8Isa::kAvxVnni:
      return "avx-vnni";
    case Int8Isa::kAvx2:
      return "avx2";
    case Int8Isa::kScalar:
      return "scalar";
  }
  return "?";
}

int64_t Int8PackedIndex(int64_t in, int64_t k) {
  const int64_t b = k / kInt8Block, o = k % kInt8Block, g = b / kInt8GroupBlocks;
  const int64_t gb = GroupBlocks(g, in / kInt8Block);
  return g * kInt8GroupBlocks * kInt8Block + (o / 4) * 4 * gb + (b % kInt8GroupBlocks) * 4 + o % 4;
}

void QuantizeWeightInt8(const float* w, int64_t out, int64_t in, bool per_row, uint8_t* packed,
                        float* scales) {
  const int64_t nb = in / kInt8Block;
  at::parallel_for(0, out, 64, [&](int64_t begin, int64_t end) {
    std::vector<int8_t> q(in);
    for (int64_t j = begin; j < end; ++j) {
      if (per_row) {
        float d = 0;
        QuantizeFittedBlock(w + j * in, in, q.data(), &d);
        std::fill(scales + j * nb, scales + (j + 1) * nb, d);
      } else {
        for (int64_t b = 0; b < nb; ++b) {
          QuantizeFittedBlock(w + j * in + b * kInt8Block, kInt8Block, q.data() + b * kInt8Block,
                              scales + j * nb + b);
        }
      }
      PackRow(q.data(), in, 0x80, packed + j * in);
    }
  });
}

void DequantizeWeightInt8(const uint8_t* packed, const float* scales, int64_t rows, int64_t in,
                          float* out) {
  const int64_t nb = in / kInt8Block;
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = packed + r * in;
    const float* d = scales + r * nb;
    float* o = out + r * in;
    ForEachPacked(in, [&](int64_t k, int64_t index) {
      o[k] = static_cast<float>(int32_t{row[index]} - 128) * d[k / kInt8Block];
    });
  }
}

void QuantizeBlockInt8Scalar(const float* v, int64_t n, int8_t* q, float* scale) {
  QuantizeFittedBlock(v, n, q, scale);
}

void QuantizeBlocksInt8(const float* v, int64_t blocks, int8_t* q, float* scales) {
  QuantizeBlocks32(v, blocks, q, scales);
}

void Int8Gemm(const uint8_t* packed, const float* scales, int64_t out, int64_t in, const float* x,
              int64_t x_stride, int64_t rows, float* y, Int8Isa isa) {
  isa = isa == Int8Isa::kAuto ? Int8IsaInUse() : isa;
  const QuantizedX qx = QuantizeX(x, x_stride, rows, in);
  // Tiles of the skinny float kernels' 4 rows and their grain; VnniRows takes any row range.
  constexpr int64_t kRows = skinny::kTileW;
  skinny::ParallelTiles((out + kRows - 1) / kRows, skinny::GrainTiles(in, rows),
                        [&](int64_t begin, int64_t end) {
                          begin *= kRows;
                          end = std::min(out, end * kRows);
                          switch (isa) {
#if ATTNSERVE_INT8_X86
                            case Int8Isa::kAvx512Vnni:
                              VnniRows(packed, scales, begin, end, in, qx, rows, y, out);
                              return;
                            case Int8Isa::kAvxVnni:
                              AvxVnniRows(packed, scales, begin, end, in, qx, rows, y, out);
                              return;
                            case Int8Isa::kAvx2:
                              Avx2Rows(packed, scales, begin, end, in, qx, rows, y, out);
                              return;
#endif
                            default:
                              ScalarRows(packed, scales, begin, end, in, qx, rows, y, out);
                              return;
                          }
                        });
}

}  // namespace attnserve::kernels

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

using int8_detail::Avx2Panels;
using int8_detail::AvxVnniPanels;
using int8_detail::ForPanelBlocks;
using int8_detail::kPanelBlockBytes;
using int8_detail::QuantizedX;

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
  typedef int32_t Int8x __attribute__((vector_size(8 * sizeof(int32_t))));
  typedef int8_t Byte16 __attribute__((vector_size(16)));
  Int16 squares{};
  Double8 t[4];  // v · q of elements 8j .. 8j + 7, exact in float64
  for (int h = 0; h < 2; ++h) {
    const Float16 v = vec::Load(p + h * vec::kLanes);
    Float16 s = v * id;
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
    // The products from the vectors at hand (widening q's bytes back from memory lane by lane
    // was most of this function's time).
    const vec::Float8 v_lo = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7);
    const vec::Float8 v_hi = __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
    const Int8x i_lo = __builtin_shufflevector(i, i, 0, 1, 2, 3, 4, 5, 6, 7);
    const Int8x i_hi = __builtin_shufflevector(i, i, 8, 9, 10, 11, 12, 13, 14, 15);
    t[2 * h] = __builtin_convertvector(v_lo, Double8) * __builtin_convertvector(i_lo, Double8);
    t[2 * h + 1] = __builtin_convertvector(v_hi, Double8) * __builtin_convertvector(i_hi, Double8);
  }
  // RefitScale's sums as vectors: the same exact float64 products and the same tree of
  // additions (i + 16, i + 8, then i + 4, i + 2, i + 1), so the same bits.
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
    for (int64_t r = begin; r < end; ++r) {
      int8_t* q = qx.q.data() + r * in;
      QuantizeBlocksInt8(x + r * x_stride, blocks, q, &qx.d[r * blocks]);
      int32_t* c = qx.c.data() + r * blocks;
      for (int64_t b = 0; b < blocks; ++b) {
        int32_t sum = 0;
        for (int64_t k = 0; k < kInt8Block; ++k) sum += q[b * kInt8Block + k];
        c[b] = -128 * sum;
      }
    }
  });
  return qx;
}

int64_t Panels(int64_t out) { return (out + kInt8PanelOutputs - 1) / kInt8PanelOutputs; }

// The definition itself, one (output, X row) pair at a time.
void ScalarPanels(const uint8_t* panels, const float* scales, int64_t first, int64_t last,
                  int64_t out, int64_t in, const QuantizedX& x, int64_t rows, float* y) {
  const int64_t nb = in / kInt8Block;
  for (int64_t panel = first; panel < last; ++panel) {
    const int64_t valid = std::min(kInt8PanelOutputs, out - panel * kInt8PanelOutputs);
    for (int64_t o = 0; o < valid; ++o) {
      const int64_t j = panel * kInt8PanelOutputs + o;
      for (int64_t r = 0; r < rows; ++r) {
        const int8_t* xq = x.q_row(r);
        const float* xd = x.d_row(r);
        float acc = 0;
        for (int64_t b = 0; b < nb; ++b) {
          int32_t p = 0;
          for (int64_t k = b * kInt8Block; k < (b + 1) * kInt8Block; ++k) {
            p += (int32_t{panels[Int8PanelIndex(in, j, k)]} - 128) * int32_t{xq[k]};
          }
          const float s = scales[Int8PanelScaleIndex(in, j, b)] * xd[b];
          acc = std::fma(static_cast<float>(p), s, acc);
        }
        y[r * out + j] = acc;
      }
    }
  }
}

#if ATTNSERVE_INT8_X86

// acc += vpdpbusd(w unsigned, x's 4 bytes broadcast, signed), in place: with the intrinsic
// GCC 12 copied each accumulator to another register and back around every vpdpbusd (two moves
// per product). DotBytes broadcasts from memory in the instruction itself; DotBytesReg takes a
// broadcast register that two panels share.
ATTNSERVE_VNNI_TARGET inline void DotBytes(__m512i& acc, __m512i w, const int8_t* x) {
  asm("vpdpbusd %[x]%{1to16%}, %[w], %[acc]"
      : [acc] "+v"(acc)
      : [w] "v"(w), [x] "m"(*reinterpret_cast<const int32_t*>(x)));
}
ATTNSERVE_VNNI_TARGET inline void DotBytesReg(__m512i& acc, __m512i w, __m512i x) {
  asm("vpdpbusd %[x], %[w], %[acc]" : [acc] "+v"(acc) : [w] "v"(w), [x] "v"(x));
}

// R rows of X (from row r0) against P adjacent panels (1 or 2): 16 int32 sums a row and panel
// per block (started at X's c), 8 vpdpbusd each, then one convert, scale product and FMA into
// the float sums. Two panels share each broadcast of X's 4 bytes (half the loads a product).
// `valid`: outputs of the last panel. `pf` brings the next panels in while these meet their
// blocks of rows (skinny_tiles.h).
template <int P, int R>
ATTNSERVE_VNNI_TARGET inline void VnniPanelRows(const uint8_t* panel, int64_t panel_bytes,
                                                const float* scales, int64_t nb,
                                                const QuantizedX& x, int64_t r0, float* y,
                                                int64_t out, int valid,
                                                skinny::NextTilePrefetch pf) {
  __m512 acc[P][R];
  const int8_t* xq[R];
  const int32_t* xc[R];
  const float* xd[R];
  for (int r = 0; r < R; ++r) {
    for (int i = 0; i < P; ++i) acc[i][r] = _mm512_setzero_ps();
    xq[r] = x.q_row(r0 + r);
    xc[r] = x.c_row(r0 + r);
    xd[r] = x.d_row(r0 + r);
  }
  const int64_t scale_stride = kInt8PanelOutputs * nb;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* w = panel + b * kPanelBlockBytes;
    __m512i p[P][R];
    for (int r = 0; r < R; ++r) {
      const __m512i c = _mm512_set1_epi32(xc[r][b]);
      for (int i = 0; i < P; ++i) p[i][r] = c;
    }
    // Unrolled: alternated step_bench runs, int8, 64 rows: 47.9-49.9 ms against 51.9-53.8.
#pragma GCC unroll 8
    for (int m = 0; m < kInt8Block / 4; ++m) {
      pf.Step();
      __m512i wv[P];
      for (int i = 0; i < P; ++i) wv[i] = _mm512_loadu_si512(w + i * panel_bytes + m * 64);
      for (int r = 0; r < R; ++r) {
        const int8_t* xw = xq[r] + b * kInt8Block + 4 * m;
        if constexpr (P == 1) {
          DotBytes(p[0][r], wv[0], xw);
        } else {
          int32_t word;
          std::memcpy(&word, xw, sizeof(word));
          const __m512i xv = _mm512_set1_epi32(word);
          for (int i = 0; i < P; ++i) DotBytesReg(p[i][r], wv[i], xv);
        }
      }
    }
    for (int i = 0; i < P; ++i) {
      const __m512 ws = _mm512_loadu_ps(scales + i * scale_stride + b * kInt8PanelOutputs);
      for (int r = 0; r < R; ++r) {
        const __m512 s = _mm512_mul_ps(ws, _mm512_set1_ps(xd[r][b]));
        // The zero-masked convert is vcvtdq2ps (the unmasked intrinsic's undefined source trips
        // GCC 12's -Wmaybe-uninitialized here).
        acc[i][r] = _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(~__mmask16{0}, p[i][r]), s, acc[i][r]);
      }
    }
  }
  const __mmask16 lanes = static_cast<__mmask16>((uint32_t{1} << valid) - 1);
  for (int r = 0; r < R; ++r) {
    for (int i = 0; i + 1 < P; ++i)
      _mm512_storeu_ps(y + (r0 + r) * out + i * kInt8PanelOutputs, acc[i][r]);
    _mm512_mask_storeu_ps(y + (r0 + r) * out + (P - 1) * kInt8PanelOutputs, lanes, acc[P - 1][r]);
  }
}

// Rows of X a group of panels meets at once: one panel's 8 x (int32 + float32) sums, or two
// panels' 6 x 2 x 2, within the 32 registers.
int VnniBlockRows(int panels) { return panels == 1 ? 8 : 6; }

// VnniPanelRows for `g` panels (1 or 2) and `n` rows, sizes known at run time.
ATTNSERVE_VNNI_TARGET
void VnniRowBlock(int g, int n, const uint8_t* panel, int64_t panel_bytes, const float* scales,
                  int64_t nb, const QuantizedX& x, int64_t r0, float* y, int64_t out, int valid,
                  skinny::NextTilePrefetch pf) {
#define ATTNSERVE_VNNI_ROWS(P, R) \
  case R:                         \
    return VnniPanelRows<P, R>(panel, panel_bytes, scales, nb, x, r0, y, out, valid, pf)
  if (g == 1) {
    switch (n) {
      ATTNSERVE_VNNI_ROWS(1, 1);
      ATTNSERVE_VNNI_ROWS(1, 2);
      ATTNSERVE_VNNI_ROWS(1, 3);
      ATTNSERVE_VNNI_ROWS(1, 4);
      ATTNSERVE_VNNI_ROWS(1, 5);
      ATTNSERVE_VNNI_ROWS(1, 6);
      ATTNSERVE_VNNI_ROWS(1, 7);
      ATTNSERVE_VNNI_ROWS(1, 8);
    }
  } else {
    switch (n) {
      ATTNSERVE_VNNI_ROWS(2, 1);
      ATTNSERVE_VNNI_ROWS(2, 2);
      ATTNSERVE_VNNI_ROWS(2, 3);
      ATTNSERVE_VNNI_ROWS(2, 4);
      ATTNSERVE_VNNI_ROWS(2, 5);
      ATTNSERVE_VNNI_ROWS(2, 6);
    }
  }
#undef ATTNSERVE_VNNI_ROWS
}

ATTNSERVE_VNNI_TARGET
void VnniPanels(const uint8_t* panels, const float* scales, int64_t first, int64_t last,
                int64_t ahead, int64_t out, int64_t in, const QuantizedX& x, int64_t rows,
                float* y) {
  const int64_t nb = in / kInt8Block;
  const int64_t panel_bytes = kInt8PanelOutputs * in;
  // Up to 8 rows, one panel at a time: in pairs a one-row mamba-130m step took 12-15% longer
  // (alternated runs of step_bench); from 9 rows on, pairs: 64 rows 5-15% faster.
  const int group = rows <= VnniBlockRows(1) ? 1 : 2;
  ForPanelBlocks(first, last, rows, group, VnniBlockRows,
                 [&](int64_t panel, int g, int64_t l, int n, int64_t block, int64_t blocks) {
                   const uint8_t* w = panels + panel * panel_bytes;
                   // One block of rows streams the panels, which the hardware prefetcher keeps up
                   // with (the software prefetch cost ~4% of a one-row step); from two blocks on, a
                   // panel's first block waited on memory without it (3-7% of a 16- or 64-row
                   // mamba-130m step).
                   const skinny::NextTilePrefetch pf =
                       blocks == 1 ? skinny::NextTilePrefetch{}
                                   : skinny::PassPrefetch(
                                         w + g * panel_bytes,
                                         w + std::min<int64_t>(2 * g, ahead - panel) * panel_bytes,
                                         block, blocks, nb * (kInt8Block / 4));
                   const int valid = static_cast<int>(
                       std::min(kInt8PanelOutputs, out - (panel + g - 1) * kInt8PanelOutputs));
                   VnniRowBlock(g, n, w, panel_bytes, scales + panel * kInt8PanelOutputs * nb, nb,
                                x, l, y + panel * kInt8PanelOutputs, out, valid, pf);
                 });
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

int64_t Int8PanelBytes(int64_t out, int64_t in) { return Panels(out) * kInt8PanelOutputs * in; }

int64_t Int8PanelScaleCount(int64_t out, int64_t in) {
  return Panels(out) * kInt8PanelOutputs * (in / kInt8Block);
}

int64_t Int8PanelIndex(int64_t in, int64_t j, int64_t k) {
  const int64_t panel = j / kInt8PanelOutputs, o = j % kInt8PanelOutputs;
  return panel * kInt8PanelOutputs * in + k / kInt8Block * kPanelBlockBytes +
         (k % kInt8Block) / 4 * (4 * kInt8PanelOutputs) + 4 * o + k % 4;
}

int64_t Int8PanelScaleIndex(int64_t in, int64_t j, int64_t b) {
  const int64_t panel = j / kInt8PanelOutputs, o = j % kInt8PanelOutputs;
  return (panel * (in / kInt8Block) + b) * kInt8PanelOutputs + o;
}

void QuantizeWeightInt8(const float* w, int64_t out, int64_t in, bool per_row, uint8_t* panels,
                        float* scales) {
  const int64_t nb = in / kInt8Block;
  at::parallel_for(0, Panels(out), 4, [&](int64_t begin, int64_t end) {
    std::vector<int8_t> q(in);
    std::vector<float> d(nb);
    for (int64_t j = begin * kInt8PanelOutputs; j < end * kInt8PanelOutputs; ++j) {
      if (j >= out) {  // padding: q = 0, d = 0
        std::fill(q.begin(), q.end(), 0);
        std::fill(d.begin(), d.end(), 0.0f);
      } else if (per_row) {
        float row_scale = 0;
        QuantizeFittedBlock(w + j * in, in, q.data(), &row_scale);
        std::fill(d.begin(), d.end(), row_scale);
      } else {
        for (int64_t b = 0; b < nb; ++b) {
          QuantizeFittedBlock(w + j * in + b * kInt8Block, kInt8Block, q.data() + b * kInt8Block,
                              &d[b]);
        }
      }
      // Four bytes at a time: a step's word of this row.
      for (int64_t k = 0; k < in; k += 4) {
        uint8_t* dst = panels + Int8PanelIndex(in, j, k);
        for (int e = 0; e < 4; ++e) dst[e] = static_cast<uint8_t>(q[k + e]) ^ 0x80;
      }
      for (int64_t b = 0; b < nb; ++b) scales[Int8PanelScaleIndex(in, j, b)] = d[b];
    }
  });
}

void DequantizeWeightInt8(const uint8_t* panels, const float* scales, int64_t in, int64_t first,
                          int64_t count, float* dst) {
  for (int64_t i = 0; i < count; ++i) {
    const int64_t j = first + i;
    float* o = dst + i * in;
    for (int64_t k = 0; k < in; ++k) {
      o[k] = static_cast<float>(int32_t{panels[Int8PanelIndex(in, j, k)]} - 128) *
             scales[Int8PanelScaleIndex(in, j, k / kInt8Block)];
    }
  }
}

void QuantizeBlockInt8Scalar(const float* v, int64_t n, int8_t* q, float* scale) {
  QuantizeFittedBlock(v, n, q, scale);
}

void QuantizeBlocksInt8(const float* v, int64_t blocks, int8_t* q, float* scales) {
  QuantizeBlocks32(v, blocks, q, scales);
}

void Int8Gemm(const uint8_t* panels, const float* scales, int64_t out, int64_t in, const float* x,
              int64_t x_stride, int64_t rows, float* y, Int8Isa isa) {
  isa = isa == Int8Isa::kAuto ? Int8IsaInUse() : isa;
  const QuantizedX qx = QuantizeX(x, x_stride, rows, in);
  // Tasks of at least the skinny kernels' work (skinny::GrainTiles, in 4-row tiles).
  const int64_t grain =
      (skinny::GrainTiles(in, rows) * skinny::kTileW + kInt8PanelOutputs - 1) / kInt8PanelOutputs;
  // `ahead`: how far the AVX-512 kernel may prefetch the next panels (ParallelTileLanes).
  ParallelTileLanes(Panels(out), grain, [&](int64_t first, int64_t last, int64_t ahead) {
    switch (isa) {
#if ATTNSERVE_INT8_X86
      case Int8Isa::kAvx512Vnni:
        return VnniPanels(panels, scales, first, last, ahead, out, in, qx, rows, y);
      case Int8Isa::kAvxVnni:
        return AvxVnniPanels(panels, scales, first, last, out, in, qx, rows, y);
      case Int8Isa::kAvx2:
        return Avx2Panels(panels, scales, first, last, out, in, qx, rows, y);
#endif
      default:
        return ScalarPanels(panels, scales, first, last, out, in, qx, rows, y);
    }
  });
}

}  // namespace attnserve::kernels

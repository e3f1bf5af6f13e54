#include "kernels/common/int8_gemm.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/common/skinny_tiles.h"
#include "kernels/common/vector_math.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define ATTNSERVE_INT8_X86 1
#define ATTNSERVE_VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vnni")))
#define ATTNSERVE_AVX2_TARGET __attribute__((target("avx2,fma")))
#else
#define ATTNSERVE_INT8_X86 0
#endif

namespace attnserve::kernels {
namespace {

using skinny::NextTilePrefetch;
using skinny::PassPrefetch;

// One row of X as the products read it: q (in) int8, d (in / kInt8Block) scales, and for
// vpdpbusd (which multiplies unsigned by signed bytes: it sees q_w + 128) c (in / 4) =
// -128 · Σ q over each group of 4, so that c + Σ (q_w + 128) q_x = Σ q_w q_x exactly.
struct QuantizedX {
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int32_t> c;
  // The scales as the VNNI tile multiplies them, one 16-lane vector per pair of blocks:
  // [d[2t]] * 8 ++ [d[2t + 1]] * 8 (zeros for a missing last block), (in / kInt8Block + 1) / 2
  // vectors a row, so that the tile loads them instead of building them at every step.
  std::vector<float> d_pairs;
  int64_t in = 0;
  const int8_t* q_row(int64_t r) const { return q.data() + r * in; }
  const float* d_row(int64_t r) const { return d.data() + r * (in / kInt8Block); }
  const int32_t* c_row(int64_t r) const { return c.data() + r * (in / 4); }
  const float* d_pairs_row(int64_t r) const {
    return d_pairs.data() + r * ((in / kInt8Block + 1) / 2) * 16;
  }
};

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

// QuantizeBlock for kInt8Block (32) elements as two vectors: the same bits. amax ignores NaNs
// as std::max does; round() is trunc() plus a carry for fractions of at least one half
// (the fraction s - trunc(s) is exact for |s| < 2^23); a NaN product quantizes to 0.
ATTNSERVE_MULTIVERSION
void QuantizeBlocks32(const float* v, int64_t blocks, int8_t* q, float* d_out) {
  using vec::Float16;
  using vec::Int16;
  static_assert(kInt8Block == 2 * vec::kLanes, "two vectors a block");
  for (int64_t b = 0; b < blocks; ++b) {
    const float* p = v + b * kInt8Block;
    const Float16 lo = vec::Load(p), hi = vec::Load(p + vec::kLanes);
    const Float16 alo = lo < 0 ? -lo : lo, ahi = hi < 0 ? -hi : hi;
    Float16 m = alo < ahi ? ahi : alo;
    // std::max(amax, |v|) in order: a NaN never wins, and max is exact, so any order agrees.
    m = m == m ? m : (alo == alo ? alo : (ahi == ahi ? ahi : Float16{}));
    float amax = 0;
    for (int i = 0; i < vec::kLanes; ++i) amax = std::max(amax, m[i]);
    const float d = amax / 127.0f;
    const float id = d > 0 ? 1.0f / d : 0.0f;
    for (int h = 0; h < 2; ++h) {
      Float16 s = (h ? hi : lo) * id;
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
      for (int l = 0; l < vec::kLanes; ++l) {
        q[b * kInt8Block + h * vec::kLanes + l] = static_cast<int8_t>(i[l]);
      }
    }
    d_out[b] = d;
  }
}

// `pairs`: also fill d_pairs (only the VNNI tile reads them).
QuantizedX QuantizeX(const float* x, int64_t x_stride, int64_t rows, int64_t in, bool pairs) {
  QuantizedX qx;
  qx.in = in;
  const int64_t blocks = in / kInt8Block;
  qx.q.resize(rows * in);
  qx.d.resize(rows * blocks);
  qx.c.resize(rows * (in / 4));
  for (int64_t r = 0; r < rows; ++r) {
    int8_t* q = qx.q.data() + r * in;
    QuantizeBlocksInt8(x + r * x_stride, blocks, q, &qx.d[r * blocks]);
    int32_t* c = qx.c.data() + r * (in / 4);
    for (int64_t g = 0; g < in / 4; ++g) {
      c[g] = -128 * (q[4 * g] + q[4 * g + 1] + q[4 * g + 2] + q[4 * g + 3]);
    }
  }
  if (!pairs) return qx;
  const int64_t pair_count = (blocks + 1) / 2;
  qx.d_pairs.assign(rows * pair_count * 16, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const float* d = qx.d_row(r);
    float* p = qx.d_pairs.data() + r * pair_count * 16;
    for (int64_t b = 0; b < blocks; ++b) std::fill_n(p + (b / 2) * 16 + (b % 2) * 8, 8, d[b]);
  }
  return qx;
}

// The fixed tree of halvings over the 16 lanes (the header's order): vec::Sum's.
inline float SumLanes(const float* a) { return vec::Sum(vec::Load(a)); }

// The definition itself, one (weight row, X row) pair at a time.
void ScalarRows(const int8_t* w, const float* ws, int64_t begin, int64_t end, int64_t in,
                const QuantizedX& x, int64_t rows, float* y, int64_t out) {
  const int64_t nb = in / kInt8Block;
  for (int64_t j = begin; j < end; ++j) {
    const int8_t* wq = w + j * in;
    const float* wd = ws + j * nb;
    for (int64_t r = 0; r < rows; ++r) {
      const int8_t* xq = x.q_row(r);
      const float* xd = x.d_row(r);
      float acc[16] = {};
      for (int64_t t = 0; t < (nb + 1) / 2; ++t) {
        for (int l = 0; l < 16; ++l) {
          const int64_t b = 2 * t + l / 8;
          int32_t p = 0;
          float s = 0;
          if (b < nb) {
            const int64_t k = b * kInt8Block + 4 * (l % 8);
            for (int m = 0; m < 4; ++m) p += int32_t{wq[k + m]} * int32_t{xq[k + m]};
            s = wd[b] * xd[b];
          }
          acc[l] = std::fma(static_cast<float>(p), s, acc[l]);
        }
      }
      y[r * out + j] = SumLanes(acc);
    }
  }
}

#if ATTNSERVE_INT8_X86

// Lanes 0-7 of one block, lanes 8-15 of the next, as 256-bit halves: per block, |q_x| times
// q_w with q_x's sign (vpmaddubsw: pairs of products, at most 2·127² < 2¹⁵), pairs summed
// into int32 groups of 4 (vpmaddwd), the same groups vpdpbusd forms.
ATTNSERVE_AVX2_TARGET
void Avx2Rows(const int8_t* w, const float* ws, int64_t begin, int64_t end, int64_t in,
              const QuantizedX& x, int64_t rows, float* y, int64_t out) {
  const int64_t nb = in / kInt8Block;
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t j = begin; j < end; ++j) {
    const int8_t* wq = w + j * in;
    const float* wd = ws + j * nb;
    for (int64_t r = 0; r < rows; ++r) {
      const int8_t* xq = x.q_row(r);
      const float* xd = x.d_row(r);
      __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
      for (int64_t t = 0; t < (nb + 1) / 2; ++t) {
        for (int h = 0; h < 2; ++h) {
          const int64_t b = 2 * t + h;
          if (b >= nb) {
            acc[h] = _mm256_fmadd_ps(_mm256_setzero_ps(), _mm256_setzero_ps(), acc[h]);
            continue;
          }
          const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wq + 32 * b));
          const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 32 * b));
          const __m256i pairs =
              _mm256_maddubs_epi16(_mm256_sign_epi8(xv, xv), _mm256_sign_epi8(wv, xv));
          const __m256i p = _mm256_madd_epi16(pairs, ones);
          acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(wd[b] * xd[b]), acc[h]);
        }
      }
      float lanes[16];
      _mm256_storeu_ps(lanes, acc[0]);
      _mm256_storeu_ps(lanes + 8, acc[1]);
      y[r * out + j] = SumLanes(lanes);
    }
  }
}

// [s[0]] * 8 ++ [s[1]] * 8 (lanes 8-15 zero when only one block is left): both as one 8-byte
// broadcast and a permutation, the last odd block without reading past it.
ATTNSERVE_VNNI_TARGET inline __m512 PairScales(const float* s, bool both) {
  if (!both) return _mm512_maskz_mov_ps(0x00FF, _mm512_set1_ps(s[0]));
  double pair;
  std::memcpy(&pair, s, sizeof(pair));
  const __m512i index = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_permutexvar_ps(index, _mm512_castpd_ps(_mm512_set1_pd(pair)));
}

// WR weight rows against XR rows of X, 64 bytes (two blocks) a step: vpdpbusd of (q_w + 128)
// and q_x from c, as in QuantizedX; the last block of an odd count with the upper half zero.
template <int WR, int XR>
ATTNSERVE_VNNI_TARGET inline void VnniTile(const int8_t* const* wq, const float* const* wd,
                                           const QuantizedX& x, int64_t l0, int64_t nb, float* y,
                                           int64_t out, int64_t j, NextTilePrefetch pf) {
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[WR][XR];
  for (int i = 0; i < WR; ++i) {
    for (int l = 0; l < XR; ++l) acc[i][l] = _mm512_setzero_ps();
  }
  for (int64_t t = 0; t < (nb + 1) / 2; ++t) {
    const bool both = 2 * t + 1 < nb;
    const __mmask64 bytes = both ? ~__mmask64{0} : __mmask64{0xFFFFFFFF};
    const __mmask16 groups = both ? 0xFFFF : 0x00FF;
    const int64_t k = 64 * t;
    __m512i wv[WR];
    __m512 ws[WR];
    pf.Step();
    for (int i = 0; i < WR; ++i) {
      if (pf.lines_per_step == 0) __builtin_prefetch(wq[i] + k + 512);
      wv[i] = _mm512_xor_si512(_mm512_maskz_loadu_epi8(bytes, wq[i] + k), bias);
      ws[i] = PairScales(wd[i] + 2 * t, both);
    }
    for (int l = 0; l < XR; ++l) {
      const __m512i xv = _mm512_maskz_loadu_epi8(bytes, x.q_row(l0 + l) + k);
      const __m512i cv = _mm512_maskz_loadu_epi32(groups, x.c_row(l0 + l) + 16 * t);
      const __m512 xs = _mm512_loadu_ps(x.d_pairs_row(l0 + l) + 16 * t);
      for (int i = 0; i < WR; ++i) {
        const __m512i p = _mm512_dpbusd_epi32(cv, wv[i], xv);
        acc[i][l] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(ws[i], xs), acc[i][l]);
      }
    }
  }
  // SumLanes is vec::Sum: a 4 x 4 tile sums its 16 accumulators side by side.
  vec::Float16 lanes[WR][XR];
  std::memcpy(lanes, acc, sizeof(lanes));
  float sums[WR][XR];
  skinny::TileSums(lanes, sums);
  for (int i = 0; i < WR; ++i) {
    for (int l = 0; l < XR; ++l) y[(l0 + l) * out + j + i] = sums[i][l];
  }
}

constexpr int kTileW = 4, kTileX = 4;

// `next`, `next_end`: the next weight tile's bytes, prefetched while this one meets X's tiles
// (skinny_tiles.h's NextTilePrefetch).
template <int WR>
ATTNSERVE_VNNI_TARGET void VnniTileRows(const int8_t* const* wq, const float* const* wd,
                                        const QuantizedX& x, int64_t rows, int64_t nb, float* y,
                                        int64_t out, int64_t j, const int8_t* next,
                                        const int8_t* next_end) {
  const int64_t passes = (rows + kTileX - 1) / kTileX, steps = (nb + 1) / 2;
  auto pass_prefetch = [&](int64_t l) {
    return PassPrefetch(next, next_end, l / kTileX, passes, steps);
  };
  int64_t l = 0;
  for (; l + kTileX <= rows; l += kTileX) {
    VnniTile<WR, kTileX>(wq, wd, x, l, nb, y, out, j, pass_prefetch(l));
  }
  switch (rows - l) {
    case 3:
      VnniTile<WR, 3>(wq, wd, x, l, nb, y, out, j, pass_prefetch(l));
      break;
    case 2:
      VnniTile<WR, 2>(wq, wd, x, l, nb, y, out, j, pass_prefetch(l));
      break;
    case 1:
      VnniTile<WR, 1>(wq, wd, x, l, nb, y, out, j, pass_prefetch(l));
      break;
  }
}

ATTNSERVE_VNNI_TARGET
void VnniRows(const int8_t* w, const float* ws, int64_t begin, int64_t end, int64_t in,
              const QuantizedX& x, int64_t rows, float* y, int64_t out) {
  const int64_t nb = in / kInt8Block;
  for (int64_t j = begin; j < end; j += kTileW) {
    const int wr = static_cast<int>(std::min<int64_t>(kTileW, end - j));
    const int8_t* wq[kTileW] = {};
    const float* wd[kTileW] = {};
    for (int i = 0; i < wr; ++i) {
      wq[i] = w + (j + i) * in;
      wd[i] = ws + (j + i) * nb;
    }
    const int8_t* next = w + (j + wr) * in;
    const int8_t* next_end = w + std::min(end, j + wr + kTileW) * in;
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
  if (Int8IsaSupported(Int8Isa::kAvx2)) return Int8Isa::kAvx2;
  return Int8Isa::kScalar;
}

// Weight rows per task: at least ~64 Ki multiply-adds (as the skinny float kernels).
int64_t GrainRows(int64_t in, int64_t rows) {
  const int64_t weight_rows = (int64_t{1} << 16) / std::max<int64_t>(1, in * rows);
  return (std::max<int64_t>(kTileW, weight_rows) + kTileW - 1) / kTileW * kTileW;
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
    case Int8Isa::kAvx2:
      return "avx2";
    case Int8Isa::kScalar:
      return "scalar";
  }
  return "?";
}

void QuantizeWeightInt8(const float* w, int64_t out, int64_t in, bool per_row, int8_t* q,
                        float* scales) {
  const int64_t nb = in / kInt8Block;
  at::parallel_for(0, out, 64, [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j) {
      if (per_row) {
        float d = 0;
        QuantizeBlock(w + j * in, in, q + j * in, &d);
        std::fill(scales + j * nb, scales + (j + 1) * nb, d);
      } else {
        for (int64_t b = 0; b < nb; ++b) {
          const int64_t k = j * in + b * kInt8Block;
          QuantizeBlock(w + k, kInt8Block, q + k, scales + j * nb + b);
        }
      }
    }
  });
}

void QuantizeBlocksInt8(const float* v, int64_t blocks, int8_t* q, float* scales) {
  QuantizeBlocks32(v, blocks, q, scales);
}

void Int8Gemm(const int8_t* q, const float* scales, int64_t out, int64_t in, const float* x,
              int64_t x_stride, int64_t rows, float* y, Int8Isa isa) {
  isa = isa == Int8Isa::kAuto ? Int8IsaInUse() : isa;
  const QuantizedX qx = QuantizeX(x, x_stride, rows, in, isa == Int8Isa::kAvx512Vnni);
  at::parallel_for(0, out, GrainRows(in, rows), [&](int64_t begin, int64_t end) {
    switch (isa) {
#if ATTNSERVE_INT8_X86
      case Int8Isa::kAvx512Vnni:
        VnniRows(q, scales, begin, end, in, qx, rows, y, out);
        return;
      case Int8Isa::kAvx2:
        Avx2Rows(q, scales, begin, end, in, qx, rows, y, out);
        return;
#endif
      default:
        ScalarRows(q, scales, begin, end, in, qx, rows, y, out);
        return;
    }
  });
}

}  // namespace attnserve::kernels

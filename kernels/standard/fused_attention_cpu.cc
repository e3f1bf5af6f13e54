#include "kernels/standard/fused_attention_cpu.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "kernels/common/status_macros.h"
#include "kernels/common/tensor_checks.h"
#include "kernels/common/vector_math.h"
#include "kernels/standard/flash_attention_cpu.h"

namespace attnserve::kernels {
namespace {

using vec::Broadcast;
using vec::Float16;
using vec::kLanes;

// Keys per tile: the softmax's max and rescale are taken once per tile; the tile's scores and
// probabilities (kKeyTile x 2 vectors, 16 KiB) stay in L1 between the two passes.
constexpr int64_t kKeyTile = 128;
// Keys scored together (kKeyBlock x NV accumulators) and value dimensions accumulated together.
constexpr int kKeyBlock = 8;
constexpr int kDimBlock = 8;

// Where one (batch, head)'s tensors are, and the mask's parameters.
struct Head {
  const float* q;  // row i at q + i * q_row
  const float* k;  // row j at k + j * k_row
  const float* v;
  float* out;  // (Lq, d) contiguous
  int64_t q_row, k_row, v_row;
  int64_t lq, lk, d;
  bool causal;
  int64_t window, sinks;
};

// sᵀ[r][n] = Σ_c k[r][c] · qᵀ[c][n] for R keys (rows of k, k_row apart) and NV vectors of
// queries (qᵀ: (d, NV) vectors, already scaled by 1/√d).
template <int NV, int R>
ATTNSERVE_VEC_INLINE void ScoreKeys(const Float16* qt, const float* k, int64_t k_row, int64_t d,
                                    Float16* s) {
  Float16 acc[R][NV] = {};
  for (int64_t c = 0; c < d; ++c) {
    Float16 qv[NV];
    for (int n = 0; n < NV; ++n) qv[n] = qt[c * NV + n];
    for (int r = 0; r < R; ++r) {
      const Float16 kb = Broadcast(k[r * k_row + c]);
      for (int n = 0; n < NV; ++n) acc[r][n] += kb * qv[n];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < NV; ++n) s[r * NV + n] = acc[r][n];
}

// oᵀ[c][n] = oᵀ[c][n] · correction[n] + Σ_j v[j][c] · p[j][n] over the tile's nk keys.
template <int NV>
ATTNSERVE_VEC_INLINE void AccumulateValues(const Float16* p, int64_t nk, const float* v,
                                           int64_t v_row, int64_t d, const Float16* correction,
                                           Float16* ot) {
  for (int64_t c0 = 0; c0 < d; c0 += kDimBlock) {
    Float16 acc[kDimBlock][NV];
    for (int r = 0; r < kDimBlock; ++r)
      for (int n = 0; n < NV; ++n) acc[r][n] = ot[(c0 + r) * NV + n] * correction[n];
    for (int64_t j = 0; j < nk; ++j) {
      Float16 pv[NV];
      for (int n = 0; n < NV; ++n) pv[n] = p[j * NV + n];
      const float* vj = v + j * v_row + c0;
      for (int r = 0; r < kDimBlock; ++r) {
        const Float16 vb = Broadcast(vj[r]);
        for (int n = 0; n < NV; ++n) acc[r][n] += vb * pv[n];
      }
    }
    for (int r = 0; r < kDimBlock; ++r)
      for (int n = 0; n < NV; ++n) ot[(c0 + r) * NV + n] = acc[r][n];
  }
}

// Queries q0 .. q0 + NV·16 - 1 of one head (those past lq are padding: zero queries, never
// stored). `scratch` holds (2·d + kKeyTile) · NV vectors.
template <int NV>
ATTNSERVE_VEC_INLINE void AttendBlock(const Head& h, int64_t q0, Float16* scratch) {
  constexpr int64_t kRows = NV * kLanes;
  const int64_t d = h.d, nq = std::min<int64_t>(kRows, h.lq - q0);
  Float16* qt = scratch;              // (d, NV): the block's queries, transposed, times 1/√d
  Float16* ot = scratch + d * NV;     // (d, NV): its output, transposed, not yet divided by l
  Float16* s = scratch + 2 * d * NV;  // (kKeyTile, NV): a tile's scores, then probabilities
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  for (int64_t c = 0; c < d; ++c)
    for (int n = 0; n < NV; ++n) qt[c * NV + n] = Float16{};
  for (int64_t i = 0; i < nq; ++i) {
    const float* qi = h.q + (q0 + i) * h.q_row;
    for (int64_t c = 0; c < d; ++c) qt[c * NV + i / kLanes][i % kLanes] = qi[c] * scale;
  }
  for (int64_t c = 0; c < d * NV; ++c) ot[c] = Float16{};

  const float neg_inf = -std::numeric_limits<float>::infinity();
  Float16 m[NV], l[NV];
  for (int n = 0; n < NV; ++n) {
    m[n] = Broadcast(neg_inf);
    l[n] = Float16{};
  }
  // The keys the block sees, as in FlashAttentionCpu: up to its last query's position; with a
  // window, the sinks' range, then the window's from its first query's lower edge.
  const int64_t offset = h.lk - h.lq;  // causal: query i is at position offset + i
  const int64_t key_end = h.causal ? offset + q0 + nq : h.lk;
  const int64_t window_begin = h.window > 0 ? std::max<int64_t>(0, offset + q0 - h.window + 1) : 0;
  const int64_t sink_end = h.window > 0 ? std::min({h.sinks, window_begin, key_end}) : 0;
  const std::pair<int64_t, int64_t> ranges[2] = {{0, sink_end},
                                                 {std::max(window_begin, sink_end), key_end}};
  for (const auto& [range_begin, range_end] : ranges) {
    for (int64_t k0 = range_begin; k0 < range_end; k0 += kKeyTile) {
      const int64_t nk = std::min(kKeyTile, range_end - k0);
      const float* k = h.k + k0 * h.k_row;
      int64_t j = 0;
      for (; j + kKeyBlock <= nk; j += kKeyBlock)
        ScoreKeys<NV, kKeyBlock>(qt, k + j * h.k_row, h.k_row, d, s + j * NV);
      for (; j < nk; ++j) ScoreKeys<NV, 1>(qt, k + j * h.k_row, h.k_row, d, s + j * NV);
      // Masks, only in a tile where some query of the block may not see some key: the causal
      // diagonal, the window's lower edge (sinks excepted).
      const bool masked =
          (h.causal && k0 + nk - 1 > offset + q0) ||
          (h.window > 0 && k0 <= offset + q0 + nq - 1 - h.window && k0 + nk > h.sinks);
      if (masked) {
        for (int64_t jj = 0; jj < nk; ++jj) {
          const int64_t key = k0 + jj;
          for (int64_t i = 0; i < nq; ++i) {
            const int64_t position = offset + q0 + i;
            if ((h.causal && key > position) ||
                (h.window > 0 && key >= h.sinks && position - key >= h.window)) {
              s[jj * NV + i / kLanes][i % kLanes] = neg_inf;
            }
          }
        }
      }
      Float16 tile_max[NV], correction[NV], row_max[NV];
      for (int n = 0; n < NV; ++n) tile_max[n] = Broadcast(neg_inf);
      for (int64_t jj = 0; jj < nk; ++jj)
        for (int n = 0; n < NV; ++n) {
          const Float16 x = s[jj * NV + n];
          tile_max[n] = x > tile_max[n] ? x : tile_max[n];
        }
      for (int n = 0; n < NV; ++n) {
        const Float16 new_max = tile_max[n] > m[n] ? tile_max[n] : m[n];
        // A lane that has seen no key yet keeps -inf as its max; 0 stands in for it in the
        // exponents so that no -inf - -inf appears (its p are zeroed below).
        row_max[n] = new_max == Broadcast(neg_inf) ? Float16{} : new_max;
        correction[n] = vec::Exp(m[n] - row_max[n]);  // m = -inf: exp clamps, o and l are 0
        m[n] = new_max;
      }
      Float16 tile_sum[NV] = {};
      for (int64_t jj = 0; jj < nk; ++jj)
        for (int n = 0; n < NV; ++n) {
          const Float16 x = s[jj * NV + n];
          Float16 p = vec::Exp(x - row_max[n]);
          if (masked) p = x == Broadcast(neg_inf) ? Float16{} : p;
          s[jj * NV + n] = p;
          tile_sum[n] += p;
        }
      for (int n = 0; n < NV; ++n) l[n] = l[n] * correction[n] + tile_sum[n];
      AccumulateValues<NV>(s, nk, h.v + k0 * h.v_row, h.v_row, d, correction, ot);
    }
  }
  // Every real query sees at least one key (key 0, or its own position), so l > 0 there.
  Float16 inv[NV];
  for (int n = 0; n < NV; ++n) inv[n] = 1.0f / (l[n] == Float16{} ? Broadcast(1.0f) : l[n]);
  for (int64_t i = 0; i < nq; ++i) {
    float* oi = h.out + (q0 + i) * d;
    const int n = static_cast<int>(i / kLanes), lane = static_cast<int>(i % kLanes);
    for (int64_t c = 0; c < d; ++c) oi[c] = ot[c * NV + n][lane] * inv[n][lane];
  }
}

ATTNSERVE_MULTIVERSION
void AttendBlock16(const Head& h, int64_t q0, Float16* scratch) { AttendBlock<1>(h, q0, scratch); }

ATTNSERVE_MULTIVERSION
void AttendBlock32(const Head& h, int64_t q0, Float16* scratch) { AttendBlock<2>(h, q0, scratch); }

at::Tensor FusedAttentionImpl(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              bool causal, int64_t window, int64_t sinks) {
  const int64_t b = q.size(0), heads = q.size(1), lq = q.size(2), d = q.size(3);
  const int64_t lk = k.size(2);
  at::Tensor out = at::empty({b, heads, lq, d}, q.options());
  if (lq == 0) return out;
  // Blocks of 32 queries (two vectors: twice the work per key read); 16 when a chunk has no
  // more, so that a short chunk computes no more padding than it must.
  const int nv = lq > kLanes ? 2 : 1;
  const int64_t rows = nv * kLanes, blocks = (lq + rows - 1) / rows;
  // Enough blocks per task that a small problem stays on the calling thread.
  const int64_t work = rows * std::min<int64_t>(lk, 1 + (causal ? lk - lq + rows : lk)) * d;
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 18) / std::max<int64_t>(1, work));
  const float* qp = q.data_ptr<float>();
  const float* kp = k.data_ptr<float>();
  const float* vp = v.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, b * heads * blocks, grain, [&](int64_t begin, int64_t end) {
    // ATen's CPU allocator aligns to 64 bytes, as Float16 needs (std::vector's did not).
    const at::Tensor scratch_buffer = at::empty({(2 * d + kKeyTile) * 2 * kLanes}, q.options());
    Float16* scratch = reinterpret_cast<Float16*>(scratch_buffer.data_ptr<float>());
    for (int64_t t = begin; t < end; ++t) {
      const int64_t bh = t / blocks, block = t % blocks;
      const int64_t bi = bh / heads, hi = bh % heads;
      const Head h{qp + bi * q.stride(0) + hi * q.stride(1),
                   kp + bi * k.stride(0) + hi * k.stride(1),
                   vp + bi * v.stride(0) + hi * v.stride(1),
                   op + bh * lq * d,
                   q.stride(2),
                   k.stride(2),
                   v.stride(2),
                   lq,
                   lk,
                   d,
                   causal,
                   window,
                   sinks};
      if (nv == 2) {
        AttendBlock32(h, block * rows, scratch);
      } else {
        AttendBlock16(h, block * rows, scratch);
      }
    }
  });
  return out;
}

}  // namespace

bool FusedAttentionSupports(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  for (const at::Tensor* t : {&q, &k, &v}) {
    if (!t->defined() || !t->device().is_cpu() || t->scalar_type() != at::kFloat || t->dim() != 4 ||
        (t->size(3) > 1 && t->stride(3) != 1)) {
      return false;
    }
  }
  const int64_t d = q.size(3);
  return d % kLanes == 0 && d >= kLanes;
}

absl::StatusOr<at::Tensor> FusedAttentionCpu(const at::Tensor& q, const at::Tensor& k,
                                             const at::Tensor& v, bool causal, int64_t window,
                                             int64_t sinks) {
  RETURN_IF_ERROR(CheckFlashAttentionArguments(q, k, v, causal, window, sinks));
  if (!FusedAttentionSupports(q, k, v)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "fused attention takes CPU float32 tensors with a contiguous last dimension and a head "
        "dimension that is a multiple of 16, got d = ",
        q.size(3)));
  }
  // A window that covers every key is no window: the same computation as without one.
  if (window >= k.size(2)) window = 0;
  if (window == 0) sinks = 0;
  return GuardTorch("fused attention", [&]() -> absl::StatusOr<at::Tensor> {
    return FusedAttentionImpl(q, k, v, causal, window, sinks);
  });
}

}  // namespace attnserve::kernels

#include "kernels/mamba2/ssd_scan_cpu.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/common/vector_math.h"

#pragma GCC diagnostic ignored "-Wpsabi"

namespace attnserve::kernels::mamba2 {
namespace {

using vec::Float16;
using vec::Int16;
using vec::kLanes;

constexpr int64_t Round16(int64_t n) { return (n + kLanes - 1) / kLanes * kLanes; }

// kSsdMaxCpuChunk (ssd_scan_cpu.h), measured: one layer of mamba2-130m's heads (24 x 64, d_state
// 128), 4096 tokens, 2 threads (attnserve_ssd_scan_bench --chunk=Q): 26.8 ms at Q 256, 20.4 at
// 128, 17.2 at 64, 16.0 at 32, 17.2 at 16; at 512 tokens 64 and 32 tie. Past 64 the quadratic part
// (M·x, C·Bᵀ) grows and a task's buffers (two Q x Q matrices) leave L2.

// C[R rows, V·16 columns] (+)= A[R, k] · B[k, V·16], in registers (R·V accumulators).
template <int R, int V>
ATTNSERVE_VEC_INLINE void GemmTile(int64_t k, const float* a, int64_t lda, const float* b,
                                   int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  Float16 acc[R][V];
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < V; ++v) {
      acc[r][v] = accumulate ? vec::Load(c + r * ldc + v * kLanes) : Float16{};
    }
  }
  for (int64_t i = 0; i < k; ++i) {
    Float16 bv[V];
    for (int v = 0; v < V; ++v) bv[v] = vec::Load(b + i * ldb + v * kLanes);
    for (int r = 0; r < R; ++r) {
      const Float16 ar = vec::Broadcast(a[r * lda + i]);
      for (int v = 0; v < V; ++v) acc[r][v] += ar * bv[v];
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < V; ++v) vec::Store(c + r * ldc + v * kLanes, acc[r][v]);
  }
}

template <int R>
ATTNSERVE_VEC_INLINE void GemmRows(int v, int64_t k, const float* a, int64_t lda, const float* b,
                                   int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  switch (v) {
    case 1:
      return GemmTile<R, 1>(k, a, lda, b, ldb, c, ldc, accumulate);
    case 2:
      return GemmTile<R, 2>(k, a, lda, b, ldb, c, ldc, accumulate);
    case 3:
      return GemmTile<R, 3>(k, a, lda, b, ldb, c, ldc, accumulate);
    default:
      return GemmTile<R, 4>(k, a, lda, b, ldb, c, ldc, accumulate);
  }
}

// C (m, n) (+)= A (m, k) · B (k, n), all row-major with leading dimensions lda, ldb, ldc; n a
// multiple of 16. With `lower`, A is lower triangular (A[r, i] = 0 for i > r, zeros that are
// stored): each tile of 4 rows stops at the k its last row needs.
ATTNSERVE_MULTIVERSION
void SmallGemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
               int64_t ldb, float* c, int64_t ldc, bool accumulate, bool lower) {
  for (int64_t j = 0; j < n; j += 4 * kLanes) {
    const int v = static_cast<int>(std::min<int64_t>(4, (n - j) / kLanes));
    for (int64_t r0 = 0; r0 < m; r0 += 4) {
      const int rows = static_cast<int>(std::min<int64_t>(4, m - r0));
      const int64_t kk = lower ? std::min<int64_t>(k, r0 + rows) : k;
      const float* ar = a + r0 * lda;
      float* cr = c + r0 * ldc + j;
      switch (rows) {
        case 1:
          GemmRows<1>(v, kk, ar, lda, b + j, ldb, cr, ldc, accumulate);
          break;
        case 2:
          GemmRows<2>(v, kk, ar, lda, b + j, ldb, cr, ldc, accumulate);
          break;
        case 3:
          GemmRows<3>(v, kk, ar, lda, b + j, ldb, cr, ldc, accumulate);
          break;
        default:
          GemmRows<4>(v, kk, ar, lda, b + j, ldb, cr, ldc, accumulate);
      }
    }
  }
}

// The per-task buffers of ScanHeads, column counts padded to 16 with zeros.
struct ChunkBuffers {
  std::vector<float> bt;   // (N, Qp): the chunk's B of the group, transposed
  std::vector<float> cb;   // (Q, Qp): C · Bᵀ
  std::vector<float> m;    // (Q, Qp): the masked, decayed M of one head
  std::vector<float> cs;   // (Q, N): C[t] · exp(a[t])
  std::vector<float> xc;   // (Q, Pp): the head's x
  std::vector<float> xw;   // (Q, Pp): x[s] · exp(a[q-1] - a[s]) · dt[s]
  std::vector<float> y;    // (Q, Pp)
  std::vector<float> st;   // (heads of the task, N, Pp): the states, transposed
  std::vector<float> dt;   // (Qp)
  std::vector<float> cum;  // (Qp)
};

// M[t, s] for s < Qp of row t: CB[t, s] · exp(a[t] - a[s]) · dt[s] where s <= t, else 0 (a
// select, not a product: exp of a later position's difference may overflow).
ATTNSERVE_MULTIVERSION
void DecayedScores(int64_t q, int64_t qp, const float* cb, const float* cum, const float* dt,
                   float* m) {
  Int16 lane;
  for (int i = 0; i < kLanes; ++i) lane[i] = i;
  for (int64_t t = 0; t < q; ++t) {
    const Float16 cum_t = vec::Broadcast(cum[t]);
    const float* cb_t = cb + t * qp;
    float* m_t = m + t * qp;
    for (int64_t s = 0; s < qp; s += kLanes) {
      if (s > t) {
        vec::Store(m_t + s, Float16{});
        continue;
      }
      const Int16 pos = lane + static_cast<int32_t>(s);
      const Int16 keep = pos <= static_cast<int32_t>(t);
      const Float16 diff = keep ? cum_t - vec::Load(cum + s) : Float16{};
      const Float16 v = vec::Exp(diff) * vec::Load(dt + s) * vec::Load(cb_t + s);
      vec::Store(m_t + s, keep ? v : Float16{});
    }
  }
}

// Batch row b, group g, heads [h0, h1) of that group, over the whole sequence. Multiversioned
// for the copies and scalings between the products (in baseline x86-64 code they were 7.2% of a
// bf16-activation pp512's samples; one layer at 512 tokens: 1.84 -> 1.69 ms).
ATTNSERVE_MULTIVERSION
void ScanHeads(const SsdScanParams& p, int64_t b, int64_t g, int64_t h0, int64_t h1,
               ChunkBuffers& w) {
  const int64_t P = p.head_dim, N = p.dstate, L = p.seqlen;
  const int64_t Q = std::min({p.chunk, kSsdMaxCpuChunk, L}), Pp = Round16(P), Qp = Round16(Q);
  const int64_t hb = h1 - h0;
  w.bt.assign(N * Qp, 0.0f);
  w.cb.assign(Q * Qp, 0.0f);
  w.m.assign(Q * Qp, 0.0f);
  w.cs.assign(Q * N, 0.0f);
  w.xc.assign(Q * Pp, 0.0f);
  w.xw.assign(Q * Pp, 0.0f);
  w.y.assign(Q * Pp, 0.0f);
  w.st.assign(hb * N * Pp, 0.0f);
  w.dt.assign(Qp, 0.0f);
  w.cum.assign(Qp, 0.0f);
  float* state_b = p.row_states ? p.row_states[b] : p.state + b * p.heads * P * N;
  for (int64_t hl = 0; hl < hb; ++hl) {
    const float* s = state_b + (h0 + hl) * P * N;
    float* st = w.st.data() + hl * N * Pp;
    for (int64_t i = 0; i < P; ++i) {
      for (int64_t n = 0; n < N; ++n) st[n * Pp + i] = s[i * N + n];
    }
  }
  const int64_t d_inner = p.heads * P;
  for (int64_t c0 = 0; c0 < L; c0 += Q) {
    const int64_t q = std::min(Q, L - c0);
    const float* bc = p.B + b * p.bc_batch_stride + c0 * p.bc_seq_stride + g * N;
    const float* cc = p.C + b * p.bc_batch_stride + c0 * p.bc_seq_stride + g * N;
    std::fill(w.bt.begin(), w.bt.end(), 0.0f);
    for (int64_t s = 0; s < q; ++s) {
      for (int64_t n = 0; n < N; ++n) w.bt[n * Qp + s] = bc[s * p.bc_seq_stride + n];
    }
    SmallGemm(q, Qp, N, cc, p.bc_seq_stride, w.bt.data(), Qp, w.cb.data(), Qp, false, false);
    for (int64_t hl = 0; hl < hb; ++hl) {
      const int64_t h = h0 + hl;
      const float a_h = p.A[h];
      const float* dt_raw = p.dt + b * p.dt_batch_stride + c0 * p.dt_seq_stride + h;
      float running = 0.0f;
      for (int64_t t = 0; t < q; ++t) {
        w.dt[t] = SoftplusClamped(dt_raw[t * p.dt_seq_stride] + p.dt_bias[h], p.dt_min, p.dt_max);
        running += w.dt[t] * a_h;
        w.cum[t] = running;
      }
      for (int64_t t = q; t < Qp; ++t) w.dt[t] = w.cum[t] = 0.0f;
      DecayedScores(q, Qp, w.cb.data(), w.cum.data(), w.dt.data(), w.m.data());
      const float* xh = p.x + b * p.x_batch_stride + c0 * p.x_seq_stride + h * P;
      const float last = w.cum[q - 1];
      for (int64_t t = 0; t < q; ++t) {
        std::copy(xh + t * p.x_seq_stride, xh + t * p.x_seq_stride + P, w.xc.data() + t * Pp);
        const float weight = std::exp(last - w.cum[t]) * w.dt[t];
        for (int64_t i = 0; i < P; ++i) w.xw[t * Pp + i] = w.xc[t * Pp + i] * weight;
        const float in = std::exp(w.cum[t]);
        for (int64_t n = 0; n < N; ++n) w.cs[t * N + n] = cc[t * p.bc_seq_stride + n] * in;
      }
      float* st = w.st.data() + hl * N * Pp;
      // y = M · x (the chunk's own tokens), then + exp(a[t]) C[t] · S_in (the state before it).
      SmallGemm(q, Pp, q, w.m.data(), Qp, w.xc.data(), Pp, w.y.data(), Pp, false, true);
      SmallGemm(q, Pp, N, w.cs.data(), N, st, Pp, w.y.data(), Pp, true, false);
      const float d_h = p.D[h];
      float* out = p.out + (b * L + c0) * d_inner + h * P;
      for (int64_t t = 0; t < q; ++t) {
        for (int64_t i = 0; i < P; ++i) {
          out[t * d_inner + i] = w.y[t * Pp + i] + d_h * w.xc[t * Pp + i];
        }
      }
      // S_out = exp(a[q-1]) S_in + Bᵀ · xw.
      const float decay = std::exp(last);
      for (int64_t k = 0; k < N * Pp; ++k) st[k] *= decay;
      SmallGemm(N, Pp, q, w.bt.data(), Qp, w.xw.data(), Pp, st, Pp, true, false);
    }
  }
  for (int64_t hl = 0; hl < hb; ++hl) {
    float* s = state_b + (h0 + hl) * P * N;
    const float* st = w.st.data() + hl * N * Pp;
    for (int64_t i = 0; i < P; ++i) {
      for (int64_t n = 0; n < N; ++n) s[i * N + n] = st[n * Pp + i];
    }
  }
}

// One decode step of batch row b, head h, its state (head_dim, dstate) updated in place.
// StepRows<NV>: dstate = 16·NV, B and C held in registers for the whole head, each state row
// read, updated and written as NV vectors and read out with one horizontal sum. 24 layers x 64
// rows of mamba2-130m's states (d_state 128), 2 threads: 44.2 ms with the state rows' read-outs
// gathered 16 at a time in an array the compiler kept in memory, 25.9 ms so (1.06x the floor
// of reading and writing every state float once: attnserve_ssd_scan_bench).
template <int NV>
ATTNSERVE_VEC_INLINE void StepRows(int64_t rows, float* state, const float* x, float dt,
                                   Float16 decay, const float* bn, const float* cn, float d_skip,
                                   float* out) {
  Float16 b[NV], c[NV];
  for (int v = 0; v < NV; ++v) {
    b[v] = vec::Load(bn + v * kLanes);
    c[v] = vec::Load(cn + v * kLanes);
  }
  for (int64_t i = 0; i < rows; ++i) {
    const Float16 dtx = vec::Broadcast(dt * x[i]);
    float* s = state + i * NV * kLanes;
    Float16 acc = Float16{};
    for (int v = 0; v < NV; ++v) {
      const Float16 h = decay * vec::Load(s + v * kLanes) + dtx * b[v];
      vec::Store(s + v * kLanes, h);
      acc += h * c[v];
    }
    out[i] = vec::Sum(acc) + d_skip * x[i];
  }
}

// Any dstate: whole vectors, then a partial one.
ATTNSERVE_VEC_INLINE void StepRowsAny(int64_t rows, int64_t n_state, float* state, const float* x,
                                      float dt, Float16 decay, const float* bn, const float* cn,
                                      float d_skip, float* out) {
  const int64_t full = n_state / kLanes * kLanes;
  const int tail = static_cast<int>(n_state - full);
  for (int64_t i = 0; i < rows; ++i) {
    const Float16 dtx = vec::Broadcast(dt * x[i]);
    float* s = state + i * n_state;
    Float16 acc = Float16{};
    for (int64_t n = 0; n < full; n += kLanes) {
      const Float16 h = decay * vec::Load(s + n) + dtx * vec::Load(bn + n);
      vec::Store(s + n, h);
      acc += h * vec::Load(cn + n);
    }
    if (tail > 0) {
      const Float16 h =
          decay * vec::LoadPartial(s + full, tail) + dtx * vec::LoadPartial(bn + full, tail);
      vec::StorePartial(s + full, h, tail);
      acc += h * vec::LoadPartial(cn + full, tail);
    }
    out[i] = vec::Sum(acc) + d_skip * x[i];
  }
}

ATTNSERVE_MULTIVERSION
void StepHead(const SsdScanParams& p, int64_t b, int64_t h) {
  const int64_t P = p.head_dim, N = p.dstate, g = h / (p.heads / p.groups);
  float* state = (p.row_states ? p.row_states[b] : p.state + b * p.heads * P * N) + h * P * N;
  const float dt =
      SoftplusClamped(p.dt[b * p.dt_batch_stride + h] + p.dt_bias[h], p.dt_min, p.dt_max);
  const Float16 decay = vec::Broadcast(std::exp(dt * p.A[h]));
  const float* x = p.x + b * p.x_batch_stride + h * P;
  const float* bn = p.B + b * p.bc_batch_stride + g * N;
  const float* cn = p.C + b * p.bc_batch_stride + g * N;
  float* out = p.out + b * p.heads * P + h * P;
  const float d = p.D[h];
  switch (N) {
    case 16:
      return StepRows<1>(P, state, x, dt, decay, bn, cn, d, out);
    case 32:
      return StepRows<2>(P, state, x, dt, decay, bn, cn, d, out);
    case 64:
      return StepRows<4>(P, state, x, dt, decay, bn, cn, d, out);
    case 128:
      return StepRows<8>(P, state, x, dt, decay, bn, cn, d, out);
    default:
      return StepRowsAny(P, N, state, x, dt, decay, bn, cn, d, out);
  }
}

}  // namespace

float SoftplusClamped(float x, float lo, float hi) {
  const float s = x > 20.0f ? x : std::log1p(std::exp(x));
  return std::min(std::max(s, lo), hi);
}

void SsdScanCpu(const SsdScanParams& p) {
  if (p.batch == 0 || p.seqlen == 0) return;
  if (p.seqlen == 1) {
    // Each (row, head) item is head_dim · dstate multiply-adds (8192 at mamba2-130m's shape).
    at::parallel_for(0, p.batch * p.heads, 4, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) StepHead(p, i / p.heads, i % p.heads);
    });
    return;
  }
  // Tasks of (row, group, block of heads): as many blocks a group as keep every thread busy
  // (twice over), since a block computes its chunks' C·Bᵀ once for all its heads.
  const int64_t per_group = p.heads / p.groups;
  const int64_t threads = at::in_parallel_region() ? 1 : at::get_num_threads();
  const int64_t want =
      std::max<int64_t>(1, (2 * threads + p.batch * p.groups - 1) / (p.batch * p.groups));
  const int64_t blocks = std::min(per_group, want);
  const int64_t block = (per_group + blocks - 1) / blocks;
  const int64_t tasks = p.batch * p.groups * blocks;
  at::parallel_for(0, tasks, 1, [&](int64_t begin, int64_t end) {
    ChunkBuffers buffers;
    for (int64_t i = begin; i < end; ++i) {
      const int64_t b = i / (p.groups * blocks), g = i / blocks % p.groups, k = i % blocks;
      const int64_t h0 = g * per_group + k * block;
      const int64_t h1 = std::min(h0 + block, (g + 1) * per_group);
      if (h0 < h1) ScanHeads(p, b, g, h0, h1, buffers);
    }
  });
}

}  // namespace attnserve::kernels::mamba2

#include "kernels/standard/fused_attention_cpu.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/common/status_macros.h"
#include "kernels/common/tensor_checks.h"
#include "kernels/common/vector_math.h"
#include "kernels/standard/decode_attention_cpu.h"
#include "kernels/standard/flash_attention_cpu.h"
#include "kernels/standard/kv_cache.h"

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

// A run of one (batch, head)'s keys and values: positions [start, start + length), position
// start + j at k + j * k_row.
struct Piece {
  const float* k;
  const float* v;
  int64_t k_row, v_row;
  int64_t start, length;
};

// The shared segments and the own keys: kMaxKvSegments + 1 pieces at most.
constexpr int kMaxPieces = static_cast<int>(kMaxKvSegments) + 1;

// Where one (batch, head)'s tensors are, and the mask's parameters.
struct Head {
  const float* q;            // row i at q + i * q_row
  Piece pieces[kMaxPieces];  // in order of position, covering [0, lk)
  int count;
  float* out;  // (Lq, d) contiguous
  int64_t q_row;
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

// A tile's keys that lie in one piece: `count` keys from k, v on.
struct Run {
  const float* k;
  const float* v;
  int64_t k_row, v_row, count;
};

// The tile [k0, k0 + nk)'s runs, in order (one per piece it crosses); returns how many. Where
// the pieces split a tile, each key is still scored and added in the same order as in one piece,
// so the result does not depend on where the pieces end.
ATTNSERVE_VEC_INLINE int TileRuns(const Head& h, int64_t k0, int64_t nk, Run* runs) {
  int count = 0;
  for (int i = 0; i < h.count && nk > 0; ++i) {
    const Piece& p = h.pieces[i];
    if (k0 >= p.start + p.length) continue;
    const int64_t take = std::min(nk, p.start + p.length - k0);
    runs[count++] = {p.k + (k0 - p.start) * p.k_row, p.v + (k0 - p.start) * p.v_row, p.k_row,
                     p.v_row, take};
    k0 += take;
    nk -= take;
  }
  return count;
}

// oᵀ[c][n] = oᵀ[c][n] · correction[n] + Σ_j v[j][c] · p[j][n] over the tile's keys (its runs'
// values, in order).
template <int NV>
ATTNSERVE_VEC_INLINE void AccumulateValues(const Float16* p, const Run* runs, int run_count,
                                           int64_t d, const Float16* correction, Float16* ot) {
  for (int64_t c0 = 0; c0 < d; c0 += kDimBlock) {
    Float16 acc[kDimBlock][NV];
    for (int r = 0; r < kDimBlock; ++r)
      for (int n = 0; n < NV; ++n) acc[r][n] = ot[(c0 + r) * NV + n] * correction[n];
    const Float16* pj = p;
    for (int run = 0; run < run_count; ++run) {
      const Run& u = runs[run];
      for (int64_t j = 0; j < u.count; ++j, pj += NV) {
        Float16 pv[NV];
        for (int n = 0; n < NV; ++n) pv[n] = pj[n];
        const float* vj = u.v + j * u.v_row + c0;
        for (int r = 0; r < kDimBlock; ++r) {
          const Float16 vb = Broadcast(vj[r]);
          for (int n = 0; n < NV; ++n) acc[r][n] += vb * pv[n];
        }
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
  Run runs[kMaxPieces];
  for (const auto& [range_begin, range_end] : ranges) {
    for (int64_t k0 = range_begin; k0 < range_end; k0 += kKeyTile) {
      const int64_t nk = std::min(kKeyTile, range_end - k0);
      const int run_count = TileRuns(h, k0, nk, runs);
      Float16* sj = s;
      for (int run = 0; run < run_count; ++run) {
        const Run& u = runs[run];
        int64_t j = 0;
        for (; j + kKeyBlock <= u.count; j += kKeyBlock, sj += kKeyBlock * NV)
          ScoreKeys<NV, kKeyBlock>(qt, u.k + j * u.k_row, u.k_row, d, sj);
        for (; j < u.count; ++j, sj += NV) ScoreKeys<NV, 1>(qt, u.k + j * u.k_row, u.k_row, d, sj);
      }
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
      AccumulateValues<NV>(s, runs, run_count, d, correction, ot);
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

// The keys and values of the attention, in pieces: the shared segments' (each (B, H, >= length,
// d)), then k, v (B, H, Lk_own, d).
struct Keys {
  const std::vector<KvSegment>* shared;
  const at::Tensor* k;
  const at::Tensor* v;
  int64_t length;  // all of them
};

at::Tensor FusedAttentionImpl(const at::Tensor& q, const Keys& keys, bool causal, int64_t window,
                              int64_t sinks) {
  const int64_t b = q.size(0), heads = q.size(1), lq = q.size(2), d = q.size(3);
  const int64_t lk = keys.length;
  at::Tensor out = at::empty({b, heads, lq, d}, q.options());
  if (lq == 0) return out;
  // Blocks of 32 queries (two vectors: twice the work per key read); 16 when a chunk has no
  // more, so that a short chunk computes no more padding than it must.
  const int nv = lq > kLanes ? 2 : 1;
  const int64_t rows = nv * kLanes, blocks = (lq + rows - 1) / rows;
  // Enough blocks per task that a small problem stays on the calling thread.
  const int64_t work = rows * std::min<int64_t>(lk, 1 + (causal ? lk - lq + rows : lk)) * d;
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 18) / std::max<int64_t>(1, work));
  // The pieces' tensors in order: the segments', then the own keys (when it has any).
  std::vector<std::pair<const at::Tensor*, const at::Tensor*>> tensors;
  std::vector<int64_t> lengths;
  for (const KvSegment& s : *keys.shared) {
    tensors.emplace_back(&s.k, &s.v);
    lengths.push_back(s.length);
  }
  if (keys.k->size(2) > 0) {
    tensors.emplace_back(keys.k, keys.v);
    lengths.push_back(keys.k->size(2));
  }
  const float* qp = q.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int64_t group = heads / keys.k->size(1);  // query heads per key/value head
  at::parallel_for(0, b * heads * blocks, grain, [&](int64_t begin, int64_t end) {
    // ATen's CPU allocator aligns to 64 bytes, as Float16 needs (std::vector's did not).
    const at::Tensor scratch_buffer = at::empty({(2 * d + kKeyTile) * 2 * kLanes}, q.options());
    Float16* scratch = reinterpret_cast<Float16*>(scratch_buffer.data_ptr<float>());
    for (int64_t t = begin; t < end; ++t) {
      const int64_t bh = t / blocks, block = t % blocks;
      const int64_t bi = bh / heads, hi = bh % heads, kv_head = hi / group;
      Head h;
      h.q = qp + bi * q.stride(0) + hi * q.stride(1);
      h.count = static_cast<int>(tensors.size());
      int64_t start = 0;
      for (int i = 0; i < h.count; ++i) {
        const at::Tensor& k = *tensors[i].first;
        const at::Tensor& v = *tensors[i].second;
        h.pieces[i] = {k.data_ptr<float>() + bi * k.stride(0) + kv_head * k.stride(1),
                       v.data_ptr<float>() + bi * v.stride(0) + kv_head * v.stride(1),
                       k.stride(2),
                       v.stride(2),
                       start,
                       lengths[i]};
        start += lengths[i];
      }
      h.out = op + bh * lq * d;
      h.q_row = q.stride(2);
      h.lq = lq;
      h.lk = lk;
      h.d = d;
      h.causal = causal;
      h.window = window;
      h.sinks = sinks;
      if (nv == 2) {
        AttendBlock32(h, block * rows, scratch);
      } else {
        AttendBlock16(h, block * rows, scratch);
      }
    }
  });
  return out;
}

// Chunks of at most this many queries, without a window, over keys laid out as a KV cache's,
// go to the decode kernel one query at a time: a block of 16 lanes would be mostly padding
// (1-4 queries over 4096 keys took 1.0-1.3 ms in blocks, 0.4-1.9 ms tiled; docs/benchmarks.md,
// issue #24).
constexpr int64_t kDecodeMaxQueries = 4;

// Whether t (B, H, n, d) is laid out as a KV cache: (H, capacity, d) contiguous per batch row.
bool CacheLayout(const at::Tensor& t) {
  return t.stride(3) == 1 && t.stride(2) == t.size(3) && t.stride(0) == t.size(1) * t.stride(1);
}

// The short chunk by the decode kernel: each (batch row, query) a decode row over the keys it
// sees, those in the shared segments as its spans.
at::Tensor ShortChunkByDecode(const at::Tensor& q, const Keys& keys, bool causal) {
  const int64_t b = q.size(0), heads = q.size(1), lq = q.size(2), d = q.size(3);
  const auto row_of = [&](const at::Tensor& k, const at::Tensor& v, int64_t bi, int64_t length) {
    return DecodeAttentionRow{k.data_ptr<float>() + bi * k.stride(0),
                              v.data_ptr<float>() + bi * v.stride(0), length, k.stride(1) / d};
  };
  std::vector<std::vector<DecodeAttentionRow>> spans(b * lq);
  std::vector<DecodeAttentionRow> rows;
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t i = 0; i < lq; ++i) {
      // The keys query i sees, from the segments on: as many of each as remain.
      int64_t remaining = causal ? keys.length - lq + i + 1 : keys.length;
      std::vector<DecodeAttentionRow>& own_spans = spans[bi * lq + i];
      for (const KvSegment& s : *keys.shared) {
        const int64_t n = std::min(s.length, remaining);
        if (n > 0) own_spans.push_back(row_of(s.k, s.v, bi, n));
        remaining -= n;
      }
      DecodeAttentionRow row = row_of(*keys.k, *keys.v, bi, remaining);
      row.shared = own_spans.data();
      row.shared_count = static_cast<int64_t>(own_spans.size());
      rows.push_back(row);
    }
  }
  const at::Tensor q_rows = q.permute({0, 2, 1, 3}).contiguous();  // (B, Lq, H, d)
  at::Tensor out = at::empty_like(q_rows);
  DecodeAttentionCpu(q_rows.data_ptr<float>(), rows.data(), b * lq, heads, d, out.data_ptr<float>(),
                     keys.k->size(1));
  return out.permute({0, 2, 1, 3}).contiguous();
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
  static const std::vector<KvSegment> kNone;
  return FusedAttentionCpu(q, kNone, k, v, causal, window, sinks);
}

absl::StatusOr<at::Tensor> FusedAttentionCpu(const at::Tensor& q,
                                             const std::vector<KvSegment>& shared,
                                             const at::Tensor& k, const at::Tensor& v, bool causal,
                                             int64_t window, int64_t sinks) {
  RETURN_IF_ERROR(CheckFloatTensor(q, "q", {-1, -1, -1, -1}));
  const int64_t b = q.size(0), d = q.size(3);
  RETURN_IF_ERROR(CheckFloatTensor(k, "k", {b, -1, -1, d}));
  const int64_t h = k.size(1);  // key/value heads
  if (h == 0 || q.size(1) % h != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("q's ", q.size(1), " heads are not a multiple of k's ", h));
  }
  RETURN_IF_ERROR(CheckFloatTensor(v, "v", {b, h, k.size(2), d}));
  if (d == 0) return absl::InvalidArgumentError("q: head dimension must be > 0, got 0");
  if (shared.size() > kMaxKvSegments) {
    return absl::InvalidArgumentError(absl::StrCat("fused attention takes at most ", kMaxKvSegments,
                                                   " shared segments, got ", shared.size()));
  }
  int64_t lk = k.size(2);
  for (size_t i = 0; i < shared.size(); ++i) {
    const std::string name = absl::StrCat("shared segment ", i);
    RETURN_IF_ERROR(CheckFloatTensor(shared[i].k, (name + " k").c_str(), {b, h, -1, d}));
    RETURN_IF_ERROR(
        CheckFloatTensor(shared[i].v, (name + " v").c_str(), {b, h, shared[i].k.size(2), d}));
    if (shared[i].length < 1 || shared[i].length > shared[i].k.size(2) ||
        !FusedAttentionSupports(q, shared[i].k, shared[i].v)) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": length ", shared[i].length,
                                                     " outside [1, ", shared[i].k.size(2),
                                                     "] or not a layout fused attention takes"));
    }
    lk += shared[i].length;
  }
  RETURN_IF_ERROR(CheckAttentionLengths(q.size(2), lk, causal, window, sinks));
  if (!FusedAttentionSupports(q, k, v)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "fused attention takes CPU float32 tensors with a contiguous last dimension and a head "
        "dimension that is a multiple of 16, got d = ",
        q.size(3)));
  }
  // A window that covers every key is no window: the same computation as without one.
  if (window >= lk) window = 0;
  if (window == 0) sinks = 0;
  return GuardTorch("fused attention", [&]() -> absl::StatusOr<at::Tensor> {
    const Keys keys{&shared, &k, &v, lk};
    bool by_decode = q.size(2) <= kDecodeMaxQueries && q.size(2) > 0 && window == 0 &&
                     CacheLayout(k) && CacheLayout(v);
    for (const KvSegment& s : shared) by_decode = by_decode && CacheLayout(s.k) && CacheLayout(s.v);
    return by_decode ? ShortChunkByDecode(q, keys, causal)
                     : FusedAttentionImpl(q, keys, causal, window, sinks);
  });
}

}  // namespace attnserve::kernels

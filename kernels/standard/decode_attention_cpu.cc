#include "kernels/standard/decode_attention_cpu.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/common/vector_math.h"

namespace attnserve::kernels {
namespace {

using vec::Float16;
using vec::kLanes;

// A cache's elements as float32 lanes: float32 as they are, bfloat16 (its bits, uint16_t)
// widened exactly (the high half of a float32's bits).
ATTNSERVE_VEC_INLINE Float16 LoadKv(const float* p) { return vec::Load(p); }
ATTNSERVE_VEC_INLINE Float16 LoadKvPartial(const float* p, int n) { return vec::LoadPartial(p, n); }
ATTNSERVE_VEC_INLINE Float16 WidenBf16(const uint16_t* p, int n) {
  typedef uint16_t Half16 __attribute__((vector_size(kLanes * sizeof(uint16_t))));
  typedef uint32_t Word16 __attribute__((vector_size(kLanes * sizeof(uint32_t))));
  Half16 h = Half16{};
  std::memcpy(&h, p, n * sizeof(uint16_t));
  const Word16 w = __builtin_convertvector(h, Word16) << 16;
  Float16 f;
  std::memcpy(&f, &w, sizeof f);
  return f;
}
ATTNSERVE_VEC_INLINE Float16 LoadKv(const uint16_t* p) { return WidenBf16(p, kLanes); }
ATTNSERVE_VEC_INLINE Float16 LoadKvPartial(const uint16_t* p, int n) { return WidenBf16(p, n); }

// q · k as a vector of partial sums over d (lane i holds the terms i, i + 16, ...): Sum of it
// is the dot product, and Sum16 of 16 of them gives the same bits for 16 keys at once.
template <typename T>
ATTNSERVE_VEC_INLINE Float16 DotLanes(const float* q, const T* k, int64_t d) {
  Float16 acc = {};
  int64_t i = 0;
  for (; i + kLanes <= d; i += kLanes) acc += vec::Load(q + i) * LoadKv(k + i);
  if (i < d) {
    const int n = static_cast<int>(d - i);
    acc += vec::LoadPartial(q + i, n) * LoadKvPartial(k + i, n);
  }
  return acc;
}

// scores[t] = (q · k_t) · scale for the `length` keys at k (one every d floats); returns the
// largest. Keys go 16 at a time: 16 independent chains of products, then one transposing
// reduction (Sum16) instead of a chain of scalar additions per key.
template <typename T>
ATTNSERVE_VEC_INLINE float ScoreKeys(const float* q, const T* k, int64_t length, int64_t d,
                                     float scale, float* scores) {
  Float16 best = vec::Broadcast(-INFINITY);
  int64_t t = 0;
  for (; t + kLanes <= length; t += kLanes) {
    Float16 acc[kLanes];
    for (int j = 0; j < kLanes; ++j) acc[j] = DotLanes(q, k + (t + j) * d, d);
    const Float16 s = vec::Sum16(acc) * scale;
    vec::Store(scores + t, s);
    best = best > s ? best : s;
  }
  float max_score = -INFINITY;
  for (int l = 0; l < kLanes; ++l) max_score = std::max(max_score, best[l]);
  for (; t < length; ++t) {
    scores[t] = vec::Sum(DotLanes(q, k + t * d, d)) * scale;
    max_score = std::max(max_score, scores[t]);
  }
  return max_score;
}

// scores[t] = exp(scores[t] - max_score) for t < n; returns their sum.
ATTNSERVE_VEC_INLINE float ExpScores(float* scores, int64_t n, float max_score) {
  const Float16 m = vec::Broadcast(max_score);
  Float16 sum = {};
  int64_t t = 0;
  for (; t + 4 * kLanes <= n; t += 4 * kLanes) {
    Float16 x[4];
    for (int u = 0; u < 4; ++u) x[u] = vec::Load(scores + t + u * kLanes) - m;
    vec::ExpN(x);
    for (int u = 0; u < 4; ++u) {
      vec::Store(scores + t + u * kLanes, x[u]);
      sum += x[u];
    }
  }
  for (; t < n; t += kLanes) {
    const int w = static_cast<int>(std::min<int64_t>(kLanes, n - t));
    Float16 x = vec::Exp(vec::LoadPartial(scores + t, w) - m);
    for (int l = w; l < kLanes; ++l) x[l] = 0;  // lanes past the end add nothing
    vec::StorePartial(scores + t, x, w);
    sum += x;
  }
  return vec::Sum(sum);
}

// Values are weighted and summed d at most kValueVectors vectors at a time, held in registers;
// even and odd positions in separate accumulators, so that consecutive positions'
// multiply-adds do not wait for each other.
constexpr int kValueVectors = 4;

// o[0 .. full + (rest > 0)) += w · v_t[0 .. 16 · full + rest).
template <typename T>
ATTNSERVE_VEC_INLINE void AddWeightedValue(Float16* o, float w, const T* vt, int full, int rest) {
  const Float16 wv = vec::Broadcast(w);
  for (int u = 0; u < full; ++u) o[u] += wv * LoadKv(vt + u * kLanes);
  if (rest > 0) o[full] += wv * LoadKvPartial(vt + full * kLanes, rest);
}

// A span's keys and values as elements of type T: its float32 or its bfloat16 pointers.
template <typename T>
ATTNSERVE_VEC_INLINE std::pair<const T*, const T*> KeysAndValues(const DecodeAttentionRow& span) {
  if constexpr (std::is_same_v<T, float>) {
    return {span.k, span.v};
  } else {
    return {span.k_bf16, span.v_bf16};
  }
}

// One (row, head): scores over the row's keys (its shared spans', then its own), a stable
// softmax, the weighted sum of values; head h of each span is at h · capacity · d. Inlined with
// d a constant where it is a common one, so that the loops over d unroll and the value
// accumulators stay in registers.
template <typename T>
ATTNSERVE_VEC_INLINE void AttendHeadOf(const float* q, const DecodeAttentionRow& row, int64_t h,
                                       int64_t d, float* scores, float* out) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  float max_score = -INFINITY;
  int64_t total = 0;
  for (int64_t s = 0; s <= row.shared_count; ++s) {
    const DecodeAttentionRow& span = s < row.shared_count ? row.shared[s] : row;
    max_score =
        std::max(max_score, ScoreKeys(q, KeysAndValues<T>(span).first + h * span.capacity * d,
                                      span.length, d, scale, scores + total));
    total += span.length;
  }
  const float inv = 1.0f / ExpScores(scores, total, max_score);
  for (int64_t c = 0; c < d; c += kValueVectors * kLanes) {
    const int64_t width = std::min<int64_t>(kValueVectors * kLanes, d - c);
    const int full = static_cast<int>(width / kLanes), rest = static_cast<int>(width % kLanes);
    Float16 even[kValueVectors] = {}, odd[kValueVectors] = {};
    int64_t position = 0;  // over all spans: a position's accumulator does not depend on them
    for (int64_t s = 0; s <= row.shared_count; ++s) {
      const DecodeAttentionRow& span = s < row.shared_count ? row.shared[s] : row;
      const T* v = KeysAndValues<T>(span).second + h * span.capacity * d + c;
      const float* p = scores + position;
      int64_t t = 0;
      if (position % 2 == 1 && t < span.length) {
        AddWeightedValue(odd, p[t], v + t * d, full, rest);
        ++t;
      }
      for (; t + 2 <= span.length; t += 2) {
        AddWeightedValue(even, p[t], v + t * d, full, rest);
        AddWeightedValue(odd, p[t + 1], v + (t + 1) * d, full, rest);
      }
      if (t < span.length) AddWeightedValue(even, p[t], v + t * d, full, rest);
      position += span.length;
    }
    for (int u = 0; u < full; ++u) vec::Store(out + c + u * kLanes, (even[u] + odd[u]) * inv);
    if (rest > 0) vec::StorePartial(out + c + full * kLanes, (even[full] + odd[full]) * inv, rest);
  }
}

template <typename T>
ATTNSERVE_VEC_INLINE void AttendHeadOfWidth(const float* q, const DecodeAttentionRow& row,
                                            int64_t h, int64_t d, float* scores, float* out) {
  if (d == 64) {
    AttendHeadOf<T>(q, row, h, 64, scores, out);
  } else if (d == 128) {
    AttendHeadOf<T>(q, row, h, 128, scores, out);
  } else {
    AttendHeadOf<T>(q, row, h, d, scores, out);
  }
}

// A row's spans are all float32 or all bfloat16 (CheckKvCache).
ATTNSERVE_MULTIVERSION
void AttendHead(const float* q, const DecodeAttentionRow& row, int64_t h, int64_t d, float* scores,
                float* out) {
  if (row.k_bf16 != nullptr) {
    AttendHeadOfWidth<uint16_t>(q, row, h, d, scores, out);
  } else {
    AttendHeadOfWidth<float>(q, row, h, d, scores, out);
  }
}

// Grouped-query attention: the query heads that share one key/value head, up to kGroupTile at
// a time, each computed exactly as AttendHeadOf computes it (the same products, sums and
// accumulators in the same order: the same bits), but with every key and value read from
// memory once for all of them: a block of 16 keys is scored for each query head while it is in
// L1, and the values are summed kValueBlock positions at a time for each head, the heads'
// even and odd accumulators kept in `acc` between blocks.
constexpr int kGroupTile = 8;
constexpr int64_t kValueBlock = 64;

template <typename T>
ATTNSERVE_VEC_INLINE void AttendGroupOf(const float* q, const DecodeAttentionRow& row, int64_t h,
                                        int n, int64_t d, float* scores, int64_t stride,
                                        float* out) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  Float16 best[kGroupTile];
  float max_score[kGroupTile];
  for (int g = 0; g < n; ++g) {
    best[g] = vec::Broadcast(-INFINITY);
    max_score[g] = -INFINITY;
  }
  int64_t total = 0;
  for (int64_t s = 0; s <= row.shared_count; ++s) {
    const DecodeAttentionRow& span = s < row.shared_count ? row.shared[s] : row;
    const T* k = KeysAndValues<T>(span).first + h * span.capacity * d;
    int64_t t = 0;
    for (; t + kLanes <= span.length; t += kLanes) {
      for (int g = 0; g < n; ++g) {
        Float16 acc[kLanes];
        for (int j = 0; j < kLanes; ++j) acc[j] = DotLanes(q + g * d, k + (t + j) * d, d);
        const Float16 sc = vec::Sum16(acc) * scale;
        vec::Store(scores + g * stride + total + t, sc);
        best[g] = best[g] > sc ? best[g] : sc;
      }
    }
    for (; t < span.length; ++t) {
      for (int g = 0; g < n; ++g) {
        const float sc = vec::Sum(DotLanes(q + g * d, k + t * d, d)) * scale;
        scores[g * stride + total + t] = sc;
        max_score[g] = std::max(max_score[g], sc);
      }
    }
    total += span.length;
  }
  float inv[kGroupTile];
  for (int g = 0; g < n; ++g) {
    for (int l = 0; l < kLanes; ++l) max_score[g] = std::max(max_score[g], best[g][l]);
    inv[g] = 1.0f / ExpScores(scores + g * stride, total, max_score[g]);
  }
  Float16 acc[kGroupTile][2][kValueVectors];  // [head][even, odd][vector]
  for (int64_t c = 0; c < d; c += kValueVectors * kLanes) {
    const int64_t width = std::min<int64_t>(kValueVectors * kLanes, d - c);
    const int full = static_cast<int>(width / kLanes), rest = static_cast<int>(width % kLanes);
    for (int g = 0; g < n; ++g) {
      for (int u = 0; u < kValueVectors; ++u) acc[g][0][u] = acc[g][1][u] = Float16{};
    }
    int64_t position = 0;  // over all spans: a position's accumulator is its parity's
    for (int64_t s = 0; s <= row.shared_count; ++s) {
      const DecodeAttentionRow& span = s < row.shared_count ? row.shared[s] : row;
      const T* v = KeysAndValues<T>(span).second + h * span.capacity * d + c;
      for (int64_t b0 = 0; b0 < span.length; b0 += kValueBlock) {
        const int64_t b1 = std::min(span.length, b0 + kValueBlock);
        for (int g = 0; g < n; ++g) {
          Float16 even[kValueVectors], odd[kValueVectors];
          for (int u = 0; u < kValueVectors; ++u) {
            even[u] = acc[g][0][u];
            odd[u] = acc[g][1][u];
          }
          const float* p = scores + g * stride + position;
          int64_t t = b0;
          if ((position + t) % 2 == 1) {
            AddWeightedValue(odd, p[t], v + t * d, full, rest);
            ++t;
          }
          for (; t + 2 <= b1; t += 2) {
            AddWeightedValue(even, p[t], v + t * d, full, rest);
            AddWeightedValue(odd, p[t + 1], v + (t + 1) * d, full, rest);
          }
          if (t < b1) AddWeightedValue(even, p[t], v + t * d, full, rest);
          for (int u = 0; u < kValueVectors; ++u) {
            acc[g][0][u] = even[u];
            acc[g][1][u] = odd[u];
          }
        }
      }
      position += span.length;
    }
    for (int g = 0; g < n; ++g) {
      float* o = out + g * d + c;
      for (int u = 0; u < full; ++u)
        vec::Store(o + u * kLanes, (acc[g][0][u] + acc[g][1][u]) * inv[g]);
      if (rest > 0) {
        vec::StorePartial(o + full * kLanes, (acc[g][0][full] + acc[g][1][full]) * inv[g], rest);
      }
    }
  }
}

template <typename T>
ATTNSERVE_VEC_INLINE void AttendGroupOfWidth(const float* q, const DecodeAttentionRow& row,
                                             int64_t h, int n, int64_t d, float* scores,
                                             int64_t stride, float* out) {
  if (d == 64) {
    AttendGroupOf<T>(q, row, h, n, 64, scores, stride, out);
  } else if (d == 128) {
    AttendGroupOf<T>(q, row, h, n, 128, scores, stride, out);
  } else {
    AttendGroupOf<T>(q, row, h, n, d, scores, stride, out);
  }
}

ATTNSERVE_MULTIVERSION
void AttendGroup(const float* q, const DecodeAttentionRow& row, int64_t h, int n, int64_t d,
                 float* scores, int64_t stride, float* out) {
  if (row.k_bf16 != nullptr) {
    AttendGroupOfWidth<uint16_t>(q, row, h, n, d, scores, stride, out);
  } else {
    AttendGroupOfWidth<float>(q, row, h, n, d, scores, stride, out);
  }
}

// Every position of a row, its shared spans' included.
int64_t RowLength(const DecodeAttentionRow& row) {
  int64_t length = row.length;
  for (int64_t s = 0; s < row.shared_count; ++s) length += row.shared[s].length;
  return length;
}

}  // namespace

void DecodeAttentionCpu(const float* q, const DecodeAttentionRow* rows, int64_t batch,
                        int64_t heads, int64_t head_dim, float* out, int64_t kv_heads) {
  const int64_t group = kv_heads > 0 ? heads / kv_heads : 1;
  int64_t total = 0, longest = 1;
  for (int64_t b = 0; b < batch; ++b) {
    total += RowLength(rows[b]);
    longest = std::max(longest, RowLength(rows[b]));
  }
  // Enough (row, head) pairs per task that a short step stays on the calling thread.
  const int64_t per_pair = std::max<int64_t>(1, total / std::max<int64_t>(1, batch)) * head_dim;
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / per_pair);
  if (group > 1) {
    // Tasks of (row, key/value head, tile of up to kGroupTile of its query heads).
    const int64_t tiles = (group + kGroupTile - 1) / kGroupTile;
    const int64_t tasks = batch * kv_heads * tiles;
    at::parallel_for(
        0, tasks, std::max<int64_t>(1, grain / kGroupTile), [&](int64_t begin, int64_t end) {
          std::vector<float> scores(kGroupTile * longest);
          for (int64_t i = begin; i < end; ++i) {
            const int64_t tile = i % tiles, bh = i / tiles;
            const int64_t b = bh / kv_heads, h = bh % kv_heads;
            const int64_t first = b * heads + h * group + tile * kGroupTile;
            const int n =
                static_cast<int>(std::min<int64_t>(kGroupTile, group - tile * kGroupTile));
            AttendGroup(q + first * head_dim, rows[b], h, n, head_dim, scores.data(), longest,
                        out + first * head_dim);
          }
        });
    return;
  }
  at::parallel_for(0, batch * heads, grain, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(longest);
    for (int64_t i = begin; i < end; ++i) {
      const int64_t b = i / heads, h = i % heads;
      AttendHead(q + i * head_dim, rows[b], h / group, head_dim, scores.data(), out + i * head_dim);
    }
  });
}

at::Tensor DecodeAttentionHeads(const at::Tensor& q, const std::vector<DecodeAttentionRow>& rows,
                                int64_t kv_heads) {
  const at::Tensor q_c = q.contiguous();
  at::Tensor heads = at::empty_like(q_c);
  DecodeAttentionCpu(q_c.data_ptr<float>(), rows.data(), q_c.size(0), q_c.size(1), q_c.size(3),
                     heads.data_ptr<float>(), kv_heads);
  return heads;
}

DecodeAttentionRow LastPositionsOf(const DecodeAttentionRow& row, int64_t window, int64_t head_dim,
                                   std::vector<DecodeAttentionRow>* spans) {
  int64_t skip = RowLength(row) - window;
  if (window <= 0 || skip <= 0) return row;
  // Position t of a span is at t * head_dim in each head's (capacity, d) block: moving the
  // pointers by n positions drops the first n and keeps the heads' stride (capacity * d).
  const auto drop = [&](DecodeAttentionRow span, int64_t n) {
    if (span.k != nullptr) span.k += n * head_dim;
    if (span.v != nullptr) span.v += n * head_dim;
    if (span.k_bf16 != nullptr) span.k_bf16 += n * head_dim;
    if (span.v_bf16 != nullptr) span.v_bf16 += n * head_dim;
    span.length -= n;
    span.shared = nullptr;
    span.shared_count = 0;
    return span;
  };
  spans->clear();
  for (int64_t s = 0; s < row.shared_count; ++s) {
    const DecodeAttentionRow& span = row.shared[s];
    if (skip >= span.length) {
      skip -= span.length;
    } else {
      spans->push_back(drop(span, skip));
      skip = 0;
    }
  }
  DecodeAttentionRow out = drop(row, skip);  // skip is 0 unless the window is in the own part
  out.shared = spans->empty() ? nullptr : spans->data();
  out.shared_count = static_cast<int64_t>(spans->size());
  return out;
}

}  // namespace attnserve::kernels

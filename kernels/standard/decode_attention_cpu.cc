#include "kernels/standard/decode_attention_cpu.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/common/vector_math.h"

namespace attnserve::kernels {
namespace {

using vec::Float16;
using vec::kLanes;

ATTNSERVE_VEC_INLINE float Dot(const float* a, const float* b, int64_t n) {
  Float16 acc = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) acc += vec::Load(a + i) * vec::Load(b + i);
  float s = 0;
  for (int l = 0; l < kLanes; ++l) s += acc[l];
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// One (row, head): scores over the row's keys (its shared spans', then its own), a stable
// softmax, the weighted sum of values; head h of each span is at h · capacity · d.
ATTNSERVE_MULTIVERSION
void AttendHead(const float* q, const DecodeAttentionRow& row, int64_t h, int64_t d, float* scores,
                float* out) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  float max_score = -INFINITY;
  int64_t total = 0;
  for (int64_t s = 0; s <= row.shared_count; ++s) {
    const DecodeAttentionRow& span = s < row.shared_count ? row.shared[s] : row;
    const float* k = span.k + h * span.capacity * d;
    for (int64_t t = 0; t < span.length; ++t) {
      const float score = Dot(q, k + t * d, d) * scale;
      scores[total + t] = score;
      max_score = std::max(max_score, score);
    }
    total += span.length;
  }
  float sum = 0;
  for (int64_t t = 0; t < total; ++t) {
    scores[t] = std::exp(scores[t] - max_score);
    sum += scores[t];
  }
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < d; ++i) out[i] = 0;
  total = 0;
  for (int64_t s = 0; s <= row.shared_count; ++s) {
    const DecodeAttentionRow& span = s < row.shared_count ? row.shared[s] : row;
    const float* v = span.v + h * span.capacity * d;
    for (int64_t t = 0; t < span.length; ++t) {
      const float p = scores[total + t] * inv;
      const float* vt = v + t * d;
      int64_t i = 0;
      for (; i + kLanes <= d; i += kLanes)
        vec::Store(out + i, vec::Load(out + i) + p * vec::Load(vt + i));
      for (; i < d; ++i) out[i] += p * vt[i];
    }
    total += span.length;
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
                        int64_t heads, int64_t head_dim, float* out) {
  int64_t total = 0, longest = 1;
  for (int64_t b = 0; b < batch; ++b) {
    total += RowLength(rows[b]);
    longest = std::max(longest, RowLength(rows[b]));
  }
  // Enough (row, head) pairs per task that a short step stays on the calling thread.
  const int64_t per_pair = std::max<int64_t>(1, total / std::max<int64_t>(1, batch)) * head_dim;
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / per_pair);
  at::parallel_for(0, batch * heads, grain, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(longest);
    for (int64_t i = begin; i < end; ++i) {
      const int64_t b = i / heads, h = i % heads;
      AttendHead(q + i * head_dim, rows[b], h, head_dim, scores.data(), out + i * head_dim);
    }
  });
}

at::Tensor DecodeAttentionHeads(const at::Tensor& q, const std::vector<DecodeAttentionRow>& rows) {
  const at::Tensor q_c = q.contiguous();
  at::Tensor heads = at::empty_like(q_c);
  DecodeAttentionCpu(q_c.data_ptr<float>(), rows.data(), q_c.size(0), q_c.size(1), q_c.size(3),
                     heads.data_ptr<float>());
  return heads;
}

}  // namespace attnserve::kernels

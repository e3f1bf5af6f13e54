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

// One (row, head): scores over the row's keys, a stable softmax, the weighted sum of values.
ATTNSERVE_MULTIVERSION
void AttendHead(const float* q, const float* k, const float* v, int64_t length, int64_t d,
                float* scores, float* out) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  float max_score = -INFINITY;
  for (int64_t t = 0; t < length; ++t) {
    scores[t] = Dot(q, k + t * d, d) * scale;
    max_score = std::max(max_score, scores[t]);
  }
  float sum = 0;
  for (int64_t t = 0; t < length; ++t) {
    scores[t] = std::exp(scores[t] - max_score);
    sum += scores[t];
  }
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < d; ++i) out[i] = 0;
  for (int64_t t = 0; t < length; ++t) {
    const float p = scores[t] * inv;
    const float* vt = v + t * d;
    int64_t i = 0;
    for (; i + kLanes <= d; i += kLanes)
      vec::Store(out + i, vec::Load(out + i) + p * vec::Load(vt + i));
    for (; i < d; ++i) out[i] += p * vt[i];
  }
}

}  // namespace

void DecodeAttentionCpu(const float* q, const DecodeAttentionRow* rows, int64_t batch,
                        int64_t heads, int64_t head_dim, float* out) {
  int64_t total = 0, longest = 1;
  for (int64_t b = 0; b < batch; ++b) {
    total += rows[b].length;
    longest = std::max(longest, rows[b].length);
  }
  // Enough (row, head) pairs per task that a short step stays on the calling thread.
  const int64_t per_pair = std::max<int64_t>(1, total / std::max<int64_t>(1, batch)) * head_dim;
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / per_pair);
  at::parallel_for(0, batch * heads, grain, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(longest);
    for (int64_t i = begin; i < end; ++i) {
      const int64_t b = i / heads, h = i % heads;
      const DecodeAttentionRow& row = rows[b];
      const int64_t offset = h * row.capacity * head_dim;
      AttendHead(q + i * head_dim, row.k + offset, row.v + offset, row.length, head_dim,
                 scores.data(), out + i * head_dim);
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

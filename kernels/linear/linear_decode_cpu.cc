#include "kernels/linear/linear_decode_cpu.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/common/vector_math.h"
#include "kernels/linear/causal_linear_attention_cpu.h"

namespace attnserve::kernels {
namespace {

using vec::Float16;
using vec::kLanes;

inline float Phi(float x) { return x > 0 ? x + 1.0f : std::exp(x); }  // elu(x) + 1

// map_features: φ = elu + 1 and + ε; else q, k are features and the floor guards the normaliser.
ATTNSERVE_MULTIVERSION
void StepHead(const float* q, const float* k, const float* v, float* s, float* z, int64_t d,
              bool map_features, float* phi_q, float* out) {
  for (int64_t i = 0; i < d; ++i) phi_q[i] = map_features ? Phi(q[i]) : q[i];
  for (int64_t j = 0; j < d; ++j) out[j] = 0;
  float den = 0;
  for (int64_t i = 0; i < d; ++i) {
    const float fk = map_features ? Phi(k[i]) : k[i];
    z[i] += fk;
    den += phi_q[i] * z[i];
    float* row = s + i * d;
    const float fq = phi_q[i];
    int64_t j = 0;
    for (; j + kLanes <= d; j += kLanes) {
      const Float16 updated = vec::Load(row + j) + fk * vec::Load(v + j);
      vec::Store(row + j, updated);
      vec::Store(out + j, vec::Load(out + j) + fq * updated);
    }
    for (; j < d; ++j) {
      row[j] += fk * v[j];
      out[j] += fq * row[j];
    }
  }
  const float inv = 1.0f / (map_features ? den + static_cast<float>(kLinearAttentionEps)
                                         : std::max(den, kPositiveNormaliserFloor));
  for (int64_t j = 0; j < d; ++j) out[j] *= inv;
}

}  // namespace

void LinearAttentionDecodeCpu(const float* q, const float* k, const float* v,
                              const LinearDecodeRow* rows, int64_t batch, int64_t heads,
                              int64_t head_dim, float* out, bool map_features) {
  // A (row, head) touches 2·d² floats; enough pairs per task that a short step stays on the
  // calling thread.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / (head_dim * head_dim));
  at::parallel_for(0, batch * heads, grain, [&](int64_t begin, int64_t end) {
    std::vector<float> phi_q(head_dim);
    for (int64_t i = begin; i < end; ++i) {
      const int64_t b = i / heads, h = i % heads;
      StepHead(q + i * head_dim, k + i * head_dim, v + i * head_dim,
               rows[b].s + h * head_dim * head_dim, rows[b].z + h * head_dim, head_dim,
               map_features, phi_q.data(), out + i * head_dim);
    }
  });
}

}  // namespace attnserve::kernels

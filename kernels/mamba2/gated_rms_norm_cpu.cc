#include "kernels/mamba2/gated_rms_norm_cpu.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>

#include "kernels/common/vector_math.h"

#pragma GCC diagnostic ignored "-Wpsabi"

namespace attnserve::kernels::mamba2 {
namespace {

using vec::Float16;
using vec::kLanes;

// One span of `n` channels of one row.
ATTNSERVE_MULTIVERSION
void NormSpan(int64_t n, const float* y, const float* z, const float* weight, float eps,
              float* out) {
  Float16 sum = Float16{};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const Float16 v = vec::Load(y + i) * vec::Silu(vec::Load(z + i));
    vec::Store(out + i, v);
    sum += v * v;
  }
  float total = vec::Sum(sum);
  for (; i < n; ++i) {
    const float zi = z[i];
    const float v = y[i] * (zi / (1.0f + std::exp(-zi)));
    out[i] = v;
    total += v * v;
  }
  const float scale = 1.0f / std::sqrt(total / static_cast<float>(n) + eps);
  const Float16 scale_v = vec::Broadcast(scale);
  for (i = 0; i + kLanes <= n; i += kLanes) {
    vec::Store(out + i, vec::Load(weight + i) * (vec::Load(out + i) * scale_v));
  }
  for (; i < n; ++i) out[i] = weight[i] * (out[i] * scale);
}

}  // namespace

void GatedRmsNormCpu(const GatedRmsNormParams& p) {
  const int64_t span = p.dim / p.groups;
  const int64_t items = p.rows * p.groups;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, span));
  at::parallel_for(0, items, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t r = i / p.groups, g = i % p.groups;
      NormSpan(span, p.y + r * p.dim + g * span, p.z + r * p.z_row_stride + g * span,
               p.weight + g * span, p.eps, p.out + r * p.dim + g * span);
    }
  });
}

}  // namespace attnserve::kernels::mamba2

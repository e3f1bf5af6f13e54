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

using Mode = MixerConfig::SsmNorm;

// One span of `n` channels of one row.
ATTNSERVE_MULTIVERSION
void NormSpan(int64_t n, const float* y, const float* z, const float* weight, float eps, Mode mode,
              float* out) {
  Float16 sum = Float16{};
  int64_t i = 0;
  // First pass: out = y · silu(z) (gate first) or y, and the sum of squares of what is normed.
  const bool gate_first = mode != Mode::kNormThenGate;
  for (; i + kLanes <= n; i += kLanes) {
    const Float16 v =
        gate_first ? vec::Load(y + i) * vec::Silu(vec::Load(z + i)) : vec::Load(y + i);
    vec::Store(out + i, v);
    sum += v * v;
  }
  float total = vec::Sum(sum);
  for (; i < n; ++i) {
    const float zi = z[i];
    const float v = gate_first ? y[i] * (zi / (1.0f + std::exp(-zi))) : y[i];
    out[i] = v;
    total += v * v;
  }
  if (mode == Mode::kGateOnly) return;
  const float scale = 1.0f / std::sqrt(total / static_cast<float>(n) + eps);
  const Float16 scale_v = vec::Broadcast(scale);
  for (i = 0; i + kLanes <= n; i += kLanes) {
    Float16 v = vec::Load(weight + i) * (vec::Load(out + i) * scale_v);
    if (!gate_first) v = v * vec::Silu(vec::Load(z + i));
    vec::Store(out + i, v);
  }
  for (; i < n; ++i) {
    float v = weight[i] * (out[i] * scale);
    if (!gate_first) v *= z[i] / (1.0f + std::exp(-z[i]));
    out[i] = v;
  }
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
               p.weight == nullptr ? nullptr : p.weight + g * span, p.eps, p.mode,
               p.out + r * p.dim + g * span);
    }
  });
}

}  // namespace attnserve::kernels::mamba2

#include "kernels/performer/favor_features_cpu.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/common/vector_math.h"

namespace attnserve::kernels {
namespace {

using vec::Float16;
using vec::kLanes;

// Σ_j a_j b_j over n floats: lane-wise partial sums, then the lanes in order.
ATTNSERVE_VEC_INLINE float Dot(const float* a, const float* b, int64_t n) {
  Float16 acc = Float16{};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) acc += vec::Load(a + j) * vec::Load(b + j);
  if (j < n) {
    const int rest = static_cast<int>(n - j);
    acc += vec::LoadPartial(a + j, rest) * vec::LoadPartial(b + j, rest);
  }
  float sum = 0;
  for (int lane = 0; lane < kLanes; ++lane) sum += acc[lane];
  return sum;
}

ATTNSERVE_MULTIVERSION
void RowFeatures(const float* x, int64_t d, const float* omega, int64_t m, bool query,
                 float* scaled, float* out) {
  const float inv_root4 = static_cast<float>(1.0 / std::pow(static_cast<double>(d), 0.25));
  for (int64_t j = 0; j < d; ++j) scaled[j] = x[j] * inv_root4;
  for (int64_t i = 0; i < m; ++i) out[i] = Dot(omega + i * d, scaled, d);
  if (query) {
    const float top = *std::max_element(out, out + m);
    for (int64_t i = 0; i < m; ++i) out[i] = std::exp(out[i] - top);
    return;
  }
  const float half_norm = 0.5f * Dot(scaled, scaled, d);
  const float inv_root_m = static_cast<float>(1.0 / std::sqrt(static_cast<double>(m)));
  for (int64_t i = 0; i < m; ++i) out[i] = std::exp(out[i] - half_norm) * inv_root_m;
}

}  // namespace

void FavorPlusRowFeaturesCpu(const float* x, int64_t rows, int64_t d, const float* omega, int64_t m,
                             bool query, float* out) {
  // A row costs m·d multiply-adds; enough rows per task that a decode step's few stay on the
  // calling thread.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, m * d));
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    std::vector<float> scaled(d);
    for (int64_t r = begin; r < end; ++r) {
      RowFeatures(x + r * d, d, omega, m, query, scaled.data(), out + r * m);
    }
  });
}

}  // namespace attnserve::kernels

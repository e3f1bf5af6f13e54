#include "kernels/common/rms_norm.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>

#include "kernels/common/vector_math.h"

#pragma GCC diagnostic ignored "-Wpsabi"

namespace attnserve::kernels {
namespace {

using vec::Float16;
using vec::kLanes;

ATTNSERVE_MULTIVERSION
void NormRows(const float* x, int64_t x_stride, int64_t begin, int64_t end, int64_t width,
              const float* weight, float epsilon, float* out) {
  const int64_t vec_width = width - width % kLanes;
  const int tail = static_cast<int>(width - vec_width);
  for (int64_t r = begin; r < end; ++r) {
    const float* row = x + r * x_stride;
    float* y = out + r * width;
    Float16 acc = Float16{};
    for (int64_t c = 0; c < vec_width; c += kLanes) {
      const Float16 v = vec::Load(row + c);
      acc += v * v;
    }
    if (tail > 0) {
      const Float16 v = vec::LoadPartial(row + vec_width, tail);
      acc += v * v;
    }
    const float scale = 1.0f / std::sqrt(vec::Sum(acc) / static_cast<float>(width) + epsilon);
    for (int64_t c = 0; c < vec_width; c += kLanes) {
      vec::Store(y + c, (vec::Load(row + c) * scale) * vec::Load(weight + c));
    }
    if (tail > 0) {
      const Float16 v = vec::LoadPartial(row + vec_width, tail);
      vec::StorePartial(y + vec_width, (v * scale) * vec::LoadPartial(weight + vec_width, tail),
                        tail);
    }
  }
}

}  // namespace

void RmsNormRows(const float* x, int64_t x_stride, int64_t rows, int64_t width, const float* weight,
                 float epsilon, float* out) {
  // ~64 Ki elements a task: a decode step's rows stay on the calling thread.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, width));
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    NormRows(x, x_stride, begin, end, width, weight, epsilon, out);
  });
}

at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double epsilon) {
  if (x.is_cpu() && x.scalar_type() == at::kFloat && x.is_contiguous() && weight.is_cpu() &&
      weight.scalar_type() == at::kFloat && weight.is_contiguous() && x.numel() > 0) {
    const int64_t width = x.size(-1);
    at::Tensor out = at::empty_like(x);
    RmsNormRows(x.data_ptr<float>(), width, x.numel() / width, width, weight.data_ptr<float>(),
                static_cast<float>(epsilon), out.data_ptr<float>());
    return out;
  }
  return x * at::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + epsilon) * weight;
}

}  // namespace attnserve::kernels

#include "kernels/linformer/linformer_reference.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/common/status_macros.h"
#include "kernels/common/tensor_checks.h"
#include "kernels/standard/standard_reference.h"

namespace attnserve::kernels {

at::Tensor LinformerInterpolationReference(const at::Tensor& projection, int64_t length) {
  const at::Tensor p = projection.to(at::kDouble).contiguous();
  const int64_t n = p.size(0), k = p.size(1);
  at::Tensor out = at::zeros({length, k}, at::kDouble);
  const double* src = p.data_ptr<double>();
  double* dst = out.data_ptr<double>();
  for (int64_t i = 0; i < length; ++i) {
    double pos = (static_cast<double>(i) + 0.5) * static_cast<double>(n) / length - 0.5;
    pos = std::min(std::max(pos, 0.0), static_cast<double>(n - 1));
    const auto lo = static_cast<int64_t>(std::floor(pos));
    const int64_t hi = std::min(lo + 1, n - 1);
    const double w = pos - static_cast<double>(lo);
    for (int64_t j = 0; j < k; ++j) {
      dst[i * k + j] = ((1 - w) * src[lo * k + j] + w * src[hi * k + j]) *
                       (static_cast<double>(n) / static_cast<double>(length));
    }
  }
  return out;
}

absl::StatusOr<at::Tensor> LinformerReference(const WeightMap& weights, const at::Tensor& x,
                                              int64_t num_heads, bool interpolate) {
  ASSIGN_OR_RETURN(auto qkv, ReferenceProjectQkv(weights, x, num_heads));
  auto [q, k, v] = qkv;
  const int64_t l = x.size(1);
  auto e_it = weights.find("E"), f_it = weights.find("F");
  if (e_it == weights.end() || f_it == weights.end() || e_it->second.dim() != 2 ||
      e_it->second.sizes() != f_it->second.sizes() || (e_it->second.size(0) < l && !interpolate)) {
    return absl::InvalidArgumentError(
        absl::StrCat("LinformerReference: expected E and F of shape (max_len >= ", l, ", k)"));
  }
  return GuardTorch("LinformerReference", [&]() -> absl::StatusOr<at::Tensor> {
    const bool stretch = e_it->second.size(0) < l;
    const at::Tensor e = stretch ? LinformerInterpolationReference(e_it->second, l)
                                 : e_it->second.to(at::kDouble).narrow(0, 0, l);  // (L, k)
    const at::Tensor f = stretch ? LinformerInterpolationReference(f_it->second, l)
                                 : f_it->second.to(at::kDouble).narrow(0, 0, l);
    const at::Tensor k_projected = at::matmul(e.t(), k);  // (B, H, k, d)
    const at::Tensor v_projected = at::matmul(f.t(), v);
    const at::Tensor scores =
        at::matmul(q, k_projected.transpose(-1, -2)) / std::sqrt(static_cast<double>(q.size(3)));
    return ReferenceProjectOutput(weights, at::matmul(at::softmax(scores, -1), v_projected));
  });
}

}  // namespace attnserve::kernels

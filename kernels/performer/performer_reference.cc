#include "kernels/performer/performer_reference.h"

#include <ATen/ATen.h>

#include <cmath>

#include "kernels/common/status_macros.h"
#include "kernels/common/tensor_checks.h"
#include "kernels/performer/performer_attention.h"
#include "kernels/standard/standard_reference.h"

namespace attnserve::kernels {
namespace {

// φ(x) = exp(ω x̂ − |x̂|²/2) / √m for x (..., d) float64, ω (m, d).
at::Tensor Phi(const at::Tensor& x, const at::Tensor& omega) {
  const double d = static_cast<double>(x.size(-1)), m = static_cast<double>(omega.size(0));
  const at::Tensor xs = x / std::pow(d, 0.25);
  const at::Tensor exponent =
      at::matmul(xs, omega.transpose(0, 1)) - 0.5 * xs.pow(2).sum(-1, /*keepdim=*/true);
  return at::exp(exponent) / std::sqrt(m);
}

}  // namespace

absl::StatusOr<at::Tensor> PerformerAttentionReference(const MixerConfig& config,
                                                       const WeightMap& weights,
                                                       const at::Tensor& x) {
  ASSIGN_OR_RETURN(auto qkv, ReferenceProjectQkv(weights, x, config.num_heads));
  auto [q, k, v] = qkv;
  return GuardTorch("PerformerAttentionReference", [&]() -> absl::StatusOr<at::Tensor> {
    const at::Tensor omega = PerformerFeatureMatrix(config).to(at::kDouble);
    at::Tensor a = at::matmul(Phi(q, omega), Phi(k, omega).transpose(-1, -2));  // (B, H, L, L)
    if (config.causal) a = a.tril();
    const at::Tensor heads = at::matmul(a, v) / a.sum(-1, /*keepdim=*/true);
    return ReferenceProjectOutput(weights, heads);
  });
}

}  // namespace attnserve::kernels

#include "kernels/performer/performer_reference.h"

#include <ATen/ATen.h>

#include "kernels/common/status_macros.h"
#include "kernels/common/tensor_checks.h"
#include "kernels/linear/causal_linear_attention_cpu.h"
#include "kernels/performer/performer_attention.h"
#include "kernels/standard/standard_reference.h"

namespace attnserve::kernels {

absl::StatusOr<at::Tensor> PerformerAttentionReference(const MixerConfig& config,
                                                       const WeightMap& weights,
                                                       const at::Tensor& x) {
  ASSIGN_OR_RETURN(auto qkv, ReferenceProjectQkv(weights, x, config.num_heads));
  auto [q, k, v] = qkv;
  return GuardTorch("PerformerAttentionReference", [&]() -> absl::StatusOr<at::Tensor> {
    const at::Tensor omega = PerformerFeatureMatrix(config).to(at::kDouble);
    const at::Tensor fq = FavorPlusFeatures(q, omega), fk = FavorPlusFeatures(k, omega);
    at::Tensor a = at::matmul(fq, fk.transpose(-1, -2));  // (B, H, L, L)
    if (config.causal) a = a.tril();
    const at::Tensor heads = at::matmul(a, v) / (a.sum(-1, /*keepdim=*/true) + kLinearAttentionEps);
    return ReferenceProjectOutput(weights, heads);
  });
}

}  // namespace attnserve::kernels

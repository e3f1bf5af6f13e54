#include "kernels/linear/linear_reference.h"

#include <ATen/ATen.h>

#include <vector>

#include "kernels/common/status_macros.h"
#include "kernels/common/tensor_checks.h"
#include "kernels/standard/standard_reference.h"

namespace attnserve::kernels {

absl::StatusOr<at::Tensor> LinearAttentionReference(const WeightMap& weights, const at::Tensor& x,
                                                    int64_t num_heads, bool causal) {
  ASSIGN_OR_RETURN(auto qkv, ReferenceProjectQkv(weights, x, num_heads));
  auto [q, k, v] = qkv;  // (B, H, L, d) float64
  return GuardTorch("LinearAttentionReference", [&]() -> absl::StatusOr<at::Tensor> {
    constexpr double kEps = 1e-6;
    const at::Tensor fq = at::elu(q) + 1, fk = at::elu(k) + 1;
    const int64_t b = q.size(0), h = q.size(1), l = q.size(2), d = q.size(3);
    at::Tensor heads;
    if (causal) {
      at::Tensor s = at::zeros({b, h, d, d}, at::kDouble);
      at::Tensor z = at::zeros({b, h, d}, at::kDouble);
      std::vector<at::Tensor> outputs;
      for (int64_t t = 0; t < l; ++t) {
        const at::Tensor q_t = fq.select(2, t), k_t = fk.select(2, t), v_t = v.select(2, t);
        s = s + k_t.unsqueeze(-1) * v_t.unsqueeze(-2);  // outer product φ(k_t) v_tᵀ
        z = z + k_t;
        const at::Tensor numerator = (q_t.unsqueeze(-1) * s).sum(-2);  // φ(q_t)ᵀ S_t
        const at::Tensor denominator = (q_t * z).sum(-1, /*keepdim=*/true) + kEps;
        outputs.push_back(numerator / denominator);
      }
      heads = l > 0 ? at::stack(outputs, 2) : at::zeros({b, h, 0, d}, at::kDouble);
    } else {
      const at::Tensor kv = at::matmul(fk.transpose(-1, -2), v);  // (B, H, d, d)
      const at::Tensor k_sum = fk.sum(2, /*keepdim=*/true);       // (B, H, 1, d)
      heads = at::matmul(fq, kv) / (at::matmul(fq, k_sum.transpose(-1, -2)) + kEps);
    }
    return ReferenceProjectOutput(weights, heads);
  });
}

}  // namespace attnserve::kernels

#include "kernels/linformer/linformer_reference.h"

#include <ATen/ATen.h>

#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/common/status_macros.h"
#include "kernels/common/tensor_checks.h"
#include "kernels/standard/standard_reference.h"

namespace attnserve::kernels {

absl::StatusOr<at::Tensor> LinformerReference(const WeightMap& weights, const at::Tensor& x,
                                              int64_t num_heads) {
  ASSIGN_OR_RETURN(auto qkv, ReferenceProjectQkv(weights, x, num_heads));
  auto [q, k, v] = qkv;
  const int64_t l = x.size(1);
  auto e_it = weights.find("E"), f_it = weights.find("F");
  if (e_it == weights.end() || f_it == weights.end() || e_it->second.dim() != 2 ||
      e_it->second.sizes() != f_it->second.sizes() || e_it->second.size(0) < l) {
    return absl::InvalidArgumentError(
        absl::StrCat("LinformerReference: expected E and F of shape (max_len >= ", l, ", k)"));
  }
  return GuardTorch("LinformerReference", [&]() -> absl::StatusOr<at::Tensor> {
    const at::Tensor e = e_it->second.to(at::kDouble).narrow(0, 0, l);  // (L, k)
    const at::Tensor f = f_it->second.to(at::kDouble).narrow(0, 0, l);
    const at::Tensor k_projected = at::matmul(e.t(), k);  // (B, H, k, d)
    const at::Tensor v_projected = at::matmul(f.t(), v);
    const at::Tensor scores =
        at::matmul(q, k_projected.transpose(-1, -2)) / std::sqrt(static_cast<double>(q.size(3)));
    return ReferenceProjectOutput(weights, at::matmul(at::softmax(scores, -1), v_projected));
  });
}

}  // namespace attnserve::kernels

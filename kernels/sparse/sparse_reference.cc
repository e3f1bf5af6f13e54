#include "kernels/sparse/sparse_reference.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "kernels/common/status_macros.h"
#include "kernels/common/tensor_checks.h"
#include "kernels/standard/standard_reference.h"

namespace attnserve::kernels {

absl::StatusOr<at::Tensor> SparseVisibilityReference(const std::string& pattern, int64_t length,
                                                     int64_t stride, int64_t summary, bool causal) {
  if (stride < 1) return absl::InvalidArgumentError(absl::StrCat("stride ", stride, " < 1"));
  if (pattern != "strided" && pattern != "fixed") {
    return absl::InvalidArgumentError(absl::StrCat("unknown pattern '", pattern, "'"));
  }
  return GuardTorch("SparseVisibilityReference", [&]() -> absl::StatusOr<at::Tensor> {
    const at::Tensor t = at::arange(length, at::kLong).unsqueeze(1);
    const at::Tensor s = at::arange(length, at::kLong).unsqueeze(0);
    at::Tensor visible;
    if (pattern == "strided") {
      const at::Tensor distance = (t - s).abs();
      visible = (distance < stride).logical_or(distance.remainder(stride) == 0);
    } else {
      visible = (s.div(stride, "floor") == t.div(stride, "floor"))
                    .logical_or(s.remainder(stride) >= stride - summary);
    }
    if (causal) visible = visible.logical_and(s <= t);
    return visible;
  });
}

absl::StatusOr<at::Tensor> MaskedSparseAttention(const at::Tensor& q, const at::Tensor& k,
                                                 const at::Tensor& v, const std::string& pattern,
                                                 int64_t stride, int64_t summary, bool causal) {
  ASSIGN_OR_RETURN(at::Tensor visible,
                   SparseVisibilityReference(pattern, q.size(2), stride, summary, causal));
  return GuardTorch("MaskedSparseAttention", [&]() -> absl::StatusOr<at::Tensor> {
    at::Tensor scores =
        at::matmul(q, k.transpose(-1, -2)) / std::sqrt(static_cast<double>(q.size(3)));
    scores.masked_fill_(visible.logical_not().to(q.device()),
                        -std::numeric_limits<double>::infinity());
    return at::matmul(at::softmax(scores, -1), v);
  });
}

absl::StatusOr<at::Tensor> SparseAttentionReference(const WeightMap& weights, const at::Tensor& x,
                                                    int64_t num_heads, const std::string& pattern,
                                                    int64_t stride, int64_t summary, bool causal) {
  ASSIGN_OR_RETURN(auto qkv, ReferenceProjectQkv(weights, x, num_heads));
  auto [q, k, v] = qkv;
  ASSIGN_OR_RETURN(at::Tensor heads,
                   MaskedSparseAttention(q, k, v, pattern, stride, summary, causal));
  return GuardTorch("SparseAttentionReference", [&]() -> absl::StatusOr<at::Tensor> {
    return ReferenceProjectOutput(weights, heads);
  });
}

}  // namespace attnserve::kernels

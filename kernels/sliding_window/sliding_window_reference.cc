#include "kernels/sliding_window/sliding_window_reference.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "kernels/common/status_macros.h"
#include "kernels/common/tensor_checks.h"
#include "kernels/standard/standard_reference.h"

namespace attnserve::kernels {

absl::StatusOr<at::Tensor> SlidingWindowAttentionReference(const WeightMap& weights,
                                                           const at::Tensor& x, int64_t num_heads,
                                                           int64_t window, int64_t sinks) {
  if (window <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("window must be > 0, got ", window));
  }
  ASSIGN_OR_RETURN(auto qkv, ReferenceProjectQkv(weights, x, num_heads));
  auto [q, k, v] = qkv;
  return GuardTorch("SlidingWindowAttentionReference", [&]() -> absl::StatusOr<at::Tensor> {
    const int64_t l = x.size(1), d = q.size(3);
    at::Tensor scores = at::matmul(q, k.transpose(-1, -2)) / std::sqrt(static_cast<double>(d));
    // Visible: s <= t and (t - window < s or s < sinks).
    const at::Tensor t = at::arange(l, at::kLong).unsqueeze(1), s = at::arange(l, at::kLong);
    const at::Tensor hidden = (s > t).logical_or((s <= t - window).logical_and(s >= sinks));
    scores = scores.masked_fill(hidden, -std::numeric_limits<double>::infinity());
    return ReferenceProjectOutput(weights, at::matmul(at::softmax(scores, -1), v));
  });
}

}  // namespace attnserve::kernels

// y = x Wᵀ (no bias) for x (..., in) and W (out, in), as the mixers and the model apply their
// weight matrices.
//
// A single row (a decode step) is a matrix-vector product, bound by the bytes of W it reads:
// - at::linear sends it to OpenBLAS's sgemm, which first packs all of W into its panel layout
//   (sgemm_incopy: 43% of a mamba-130m decode step's profile), moving every weight twice;
//   at::mv (sgemv) streams W once;
// - with a bfloat16 copy (LinearWeight(w, /*bf16_copy=*/true), for weights whose values are
//   bfloat16-exact: the server's --weight_precision=bf16 rounds them at load), it reads half the
//   bytes (bf16_gemv.h). Products of several rows always use the float32 W, so every path
//   computes with the same weight values and differs only in summation order.
#pragma once

#include <ATen/core/Tensor.h>

namespace attnserve::kernels {

class LinearWeight {
 public:
  LinearWeight() = default;
  // `weight` (out, in) float32; made contiguous.
  explicit LinearWeight(const at::Tensor& weight, bool bf16_copy = false);

  const at::Tensor& weight() const { return weight_; }
  at::Tensor operator()(const at::Tensor& x) const;

 private:
  at::Tensor weight_;
  at::Tensor bf16_;  // (out, in) bfloat16, or undefined
};

// For a weight without a LinearWeight of its own.
at::Tensor Linear(const at::Tensor& x, const at::Tensor& weight);

}  // namespace attnserve::kernels

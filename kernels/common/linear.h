// y = x Wᵀ (no bias) for x (..., in) and W (out, in), as the mixers and the model apply their
// weight matrices.
//
// Up to kSkinnyGemmMaxRows rows of a step (x (B, in) or (B, 1, in): one row per session of
// the batch), and up to kSkinnyGemmMaxSequenceRows of a sequence (x (..., L, in), L > 1: a
// prefill chunk, where sgemm is faster beyond that), go to the skinny kernels (skinny_gemm.h),
// which stream W once without packing it, reading the bfloat16 copy when there is one
// (LinearWeight(w, /*bf16_copy=*/true), for weights whose values are bfloat16-exact: the server's
// --weight_precision=bf16 rounds them at load): half the bytes. A row's result there does not
// depend on the other rows (bit-identical alone or in a batch). More rows (prefill) go to
// at::linear (OpenBLAS sgemm) on the float32 W, which holds the same values: the paths differ only
// in summation order.
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

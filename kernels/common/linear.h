// y = x Wᵀ (no bias) for x (..., in) and W (out, in): at::linear, except for a single row.
//
// A decode step multiplies one token's row by every weight matrix of the model. at::linear
// sends that to OpenBLAS's sgemm, which first packs all of W into its panel layout
// (sgemm_incopy: 43% of a mamba-130m decode step's profile) and so moves every weight twice;
// a matrix-vector product (sgemv) streams W once, which is what a memory-bound step needs.
#pragma once

#include <ATen/ATen.h>

#include <vector>

namespace attnserve::kernels {

inline at::Tensor Linear(const at::Tensor& x, const at::Tensor& weight) {
  if (x.is_cpu() && x.dim() >= 1 && x.numel() == x.size(-1) && weight.is_contiguous()) {
    std::vector<int64_t> sizes = x.sizes().vec();
    sizes.back() = weight.size(0);
    return at::mv(weight, x.reshape({-1})).view(sizes);
  }
  return at::linear(x, weight);
}

}  // namespace attnserve::kernels

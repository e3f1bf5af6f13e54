// Float64 reference for the sparse mixer, from the patterns' definitions with an explicit mask
// over the full (L x L) score matrix: slow on purpose, obviously correct. For tests and
// benchmarks (the naive masked implementation).
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "absl/status/statusor.h"
#include "kernels/common/mixer.h"

namespace attnserve::kernels {

// Which keys each query sees, (L, L) bool, row t = query position t, column s = key position:
//   strided: |t - s| < l or (t - s) mod l = 0;  fixed: ⌊s/l⌋ = ⌊t/l⌋ or s mod l >= l - c;
//   causal: and s <= t.
absl::StatusOr<at::Tensor> SparseVisibilityReference(const std::string& pattern, int64_t length,
                                                     int64_t stride, int64_t summary, bool causal);

// The mixer's output for a whole sequence x (B, L, D) with the standard projections' weights.
// (B, L, D) float64.
absl::StatusOr<at::Tensor> SparseAttentionReference(const WeightMap& weights, const at::Tensor& x,
                                                    int64_t num_heads, const std::string& pattern,
                                                    int64_t stride, int64_t summary, bool causal);

// Attention of q (B, H, L, d) over k, v with that mask, in the inputs' dtype (a naive masked
// implementation: the full score matrix).
absl::StatusOr<at::Tensor> MaskedSparseAttention(const at::Tensor& q, const at::Tensor& k,
                                                 const at::Tensor& v, const std::string& pattern,
                                                 int64_t stride, int64_t summary, bool causal);

}  // namespace attnserve::kernels

// Float64 reference for the sliding_window mixer, from the formula with a full (L x L) banded
// mask: slow on purpose, obviously correct. For tests and benchmarks.
#pragma once

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "kernels/common/mixer.h"

namespace attnserve::kernels {

// The mixer's output for a whole sequence x (B, L, D): query t sees keys t - window + 1 .. t,
// and keys 0 .. sinks - 1 that are not after it. (B, L, D) float64.
absl::StatusOr<at::Tensor> SlidingWindowAttentionReference(const WeightMap& weights,
                                                           const at::Tensor& x, int64_t num_heads,
                                                           int64_t window, int64_t sinks = 0);

}  // namespace attnserve::kernels

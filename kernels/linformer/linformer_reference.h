// Float64 reference for the linformer mixer, written straight from the formula; for tests.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "absl/status/statusor.h"
#include "kernels/common/mixer.h"

namespace attnserve::kernels {

// y = o_proj(softmax(Q (E[:L]ᵀ K)ᵀ / √d) (F[:L]ᵀ V)) per head, for a whole sequence x
// (B, L, D) (float32 or float64) and the linformer weights (projections, "E", "F" of shape
// (max_len, k), L <= max_len; or any L with `interpolate`, E and F then stretched to L rows by
// LinformerInterpolationReference when L > max_len). Returns (B, L, D) float64.
absl::StatusOr<at::Tensor> LinformerReference(const WeightMap& weights, const at::Tensor& x,
                                              int64_t num_heads, bool interpolate = false);

// `projection` (N, k) stretched to (L, k), element by element in float64: row i is the linear
// interpolation at position p = (i + 0.5) N / L - 0.5 (clamped to [0, N - 1]) between rows
// floor(p) and floor(p) + 1, times N / L.
at::Tensor LinformerInterpolationReference(const at::Tensor& projection, int64_t length);

}  // namespace attnserve::kernels

// Float64 reference for the linear mixer, written straight from the formulas; for tests.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "absl/status/statusor.h"
#include "kernels/common/mixer.h"

namespace attnserve::kernels {

// The linear mixer's output for a whole sequence x (B, L, D) (float32 or float64), from a
// zero state, in float64 (B, L, D). φ(x) = elu(x) + 1, ε = 1e-6.
//   causal: the token-by-token recurrence S_t = S_{t-1} + φ(k_t) v_tᵀ, z_t = z_{t-1} + φ(k_t),
//           o_t = φ(q_t)ᵀ S_t / (φ(q_t)ᵀ z_t + ε).
//   bidirectional: φ(Q)(φ(K)ᵀ V) / (φ(Q) Σ_t φ(k_t) + ε).
absl::StatusOr<at::Tensor> LinearAttentionReference(const WeightMap& weights, const at::Tensor& x,
                                                    int64_t num_heads, bool causal);

}  // namespace attnserve::kernels

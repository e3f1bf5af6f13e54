// Float64 reference for the performer mixer: exact FAVOR+ (Choromanski et al., 2021) from the
// formulas, with a full (L x L) matrix of feature products and nothing added to the normaliser:
//   out_t = Σ_s A_ts v_s / Σ_s A_ts,  A_ts = φ(q_t)·φ(k_s) (s <= t when causal),
//   φ(x) = exp(ω x̂ − |x̂|²/2) / √m,  x̂ = x / d^{1/4},
// written here from the paper (not with the mixer's feature functions), with the mixer's own ω
// (performer_attention.h). Slow on purpose. For tests.
#pragma once

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "kernels/common/mixer.h"

namespace attnserve::kernels {

// The mixer's output for a whole sequence x (B, L, D): (B, L, D) float64.
absl::StatusOr<at::Tensor> PerformerAttentionReference(const MixerConfig& config,
                                                       const WeightMap& weights,
                                                       const at::Tensor& x);

}  // namespace attnserve::kernels

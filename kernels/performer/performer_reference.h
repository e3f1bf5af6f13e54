// Float64 reference for the performer mixer, from the formulas with a full (L x L) matrix of
// feature products: out_t = Σ_s A_ts v_s / (Σ_s A_ts + ε), A_ts = φ(q_t)·φ(k_s) (s <= t when
// causal), with the mixer's own ω (performer_attention.h). Slow on purpose. For tests.
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

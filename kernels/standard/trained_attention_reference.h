// A float64 reference for the standard mixer with the features of trained checkpoints (grouped
// key/value heads, a head width of its own, q/k/v and o biases, per-head q/k RMSNorms before the
// rotary positions, "default" rotary positions and a window), written from the formulas with full
// score matrices and nothing shared with the kernels: projections and biases in float64, keys and
// values repeated per group, rotations with angles p / theta^(2i / rotary_dim) in float64, the mask
// of a window of W latest positions. For tests, not for serving.
#pragma once

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "kernels/common/mixer.h"

namespace attnserve::kernels {

// The mixer's output for a whole causal sequence x (B, L, D), its first token at position 0
// (float32 or float64): (B, L, D) float64. config.rope must be disabled or of type "default".
absl::StatusOr<at::Tensor> TrainedAttentionReference(const MixerConfig& config,
                                                     const WeightMap& weights, const at::Tensor& x);

}  // namespace attnserve::kernels

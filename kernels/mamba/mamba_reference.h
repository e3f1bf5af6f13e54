// A plain float64 Mamba-1 mixer written straight from the formulas (a loop over time), the
// reference the fused CPU and CUDA kernels are checked against. Slow by design. With
// config.mamba_heads > 1, Zamba's multi-head form and layout (mamba_mixer.h).
#pragma once

#include <ATen/core/Tensor.h>

#include "kernels/common/mixer.h"

namespace attnserve::kernels::mamba {

// x (B, L, d_model), any float dtype -> y (B, L, d_model) float64, from a zero state.
at::Tensor MambaReference(const MixerConfig& config, const WeightMap& weights, const at::Tensor& x);

}  // namespace attnserve::kernels::mamba

// A plain float64 Mamba-2 mixer written straight from the formulas (the recurrence, a loop over
// time; no chunks), the reference the chunked CPU scan and its decode step are checked against.
// The gated norm is mamba_ssm's, per group (gated_rms_norm_cpu.h). Slow by design.
#pragma once

#include <ATen/core/Tensor.h>

#include "kernels/common/mixer.h"

namespace attnserve::kernels::mamba2 {

// x (B, L, d_model), any float dtype -> y (B, L, d_model) float64, from a zero state.
at::Tensor Mamba2Reference(const MixerConfig& config, const WeightMap& weights,
                           const at::Tensor& x);

}  // namespace attnserve::kernels::mamba2

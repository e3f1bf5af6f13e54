// The gated RMSNorm that ends a Mamba-2 mixer, in mamba_ssm's form (RMSNormGated with
// norm_before_gate=False and group_size = d_inner / groups; mode kGateThenNorm):
//   v   = y · silu(z)
//   out = weight · v / sqrt(mean(v² over the group's span) + eps)
// each row's d_inner channels normalised in `groups` spans of d_inner / groups. The other modes
// (MixerConfig::SsmNorm): kNormThenGate, norm_before_gate=True (Falcon-H1's):
//   out = weight · y / sqrt(mean(y² over the span) + eps) · silu(z);
// kGateOnly, no norm (Falcon-H1's mamba_rms_norm false; weight unused): out = y · silu(z). With one
// group this is transformers' MambaRMSNormGated; with several, transformers (up to v4.51) spans all
// of d_inner, which is a bug upstream fixed in mamba_ssm's direction (docs/models.md).
// All in float32, as both compute it.
#pragma once

#include <cstdint>

#include "kernels/common/mixer.h"

namespace attnserve::kernels::mamba2 {

struct GatedRmsNormParams {
  int64_t rows = 0, dim = 0, groups = 1;
  const float* y = nullptr;  // (rows, dim) contiguous
  const float* z = nullptr;  // (rows, dim), row stride z_row_stride
  int64_t z_row_stride = 0;
  const float* weight = nullptr;  // (dim)
  float eps = 1e-5f;
  float* out = nullptr;  // (rows, dim) contiguous; may be y itself
  MixerConfig::SsmNorm mode = MixerConfig::SsmNorm::kGateThenNorm;
};

// Parallel over rows with ATen's thread pool.
void GatedRmsNormCpu(const GatedRmsNormParams& params);

}  // namespace attnserve::kernels::mamba2

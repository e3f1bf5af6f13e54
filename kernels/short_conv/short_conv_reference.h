// A float64 reference of the gated short convolution (short_conv_mixer.h), written from
// transformers' Lfm2ShortConv.slow_forward with nothing shared with the kernels: in_proj, the
// B·x product, a depthwise causal conv with zero history, C·conv, out_proj. For tests.
#pragma once

#include <ATen/core/Tensor.h>

#include "kernels/common/mixer.h"

namespace attnserve::kernels::short_conv {

// x (B, L, D), a whole sequence from an empty state -> (B, L, D) float64.
at::Tensor ShortConvReference(const MixerConfig& config, const WeightMap& weights,
                              const at::Tensor& x);

}  // namespace attnserve::kernels::short_conv

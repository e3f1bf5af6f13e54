// LFM2's gated short convolution (transformers' Lfm2ShortConv), with its checkpoint's weights
// (D = d_model, K = d_conv, conv_L_cache):
//   in_proj.weight (3·D, D)      conv.weight (D, 1, K)      out_proj.weight (D, D)
//   and with MixerConfig::conv_bias in_proj.bias (3·D), conv.bias (D), out_proj.bias (D).
// Forward: B, C, x = in_proj(x) split in that order; Bx = B · x; c = the depthwise causal conv
// of Bx over the last K positions (no activation); y = out_proj(C · c).
// State (MixerState.tensors): {conv_state (B, D, K)}: the last K values of Bx, newest last, as
// Hugging Face's Lfm2HybridConvCache holds them; fixed size. The CPU runs mamba's conv kernel
// (kernels/mamba/causal_conv1d_cpu.h) without its SiLU; weights on a GPU run ATen's operations.
// Declared in kernels/common/mixer_registry.h: ExpectedShortConvWeights, RandomShortConvWeights,
// CreateShortConvMixer.
#pragma once

#include "kernels/common/mixer_registry.h"

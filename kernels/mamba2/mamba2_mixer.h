// The Mamba-2 mixer (SSD), from in_proj to out_proj, with Hugging Face Mamba2Mixer's weights
// (H = ssm_heads, G = ssm_groups, N = d_state, d_inner = expand · d_model = H · head_dim,
// conv_dim = d_inner + 2·G·N):
//   in_proj.weight (2·d_inner + 2·G·N + H, d_model): rows [z | x B C | dt]
//   conv1d.weight (conv_dim, 1, d_conv)     conv1d.bias (conv_dim)
//   dt_bias (H)    A_log (H)    D (H)      norm.weight (d_inner)
//   out_proj.weight (d_model, d_inner)
// Forward: zxbcdt = in_proj(x); xBC = silu(causal_conv1d(xBC)); the SSD scan of x with B, C,
// dt = clamp(softplus(dt + dt_bias), time_step_limit) and A = -exp(A_log) (ssd_scan_cpu.h);
// y + D·x through the gated RMSNorm of each group (gated_rms_norm_cpu.h); out_proj.
// State (MixerState.tensors): {conv_state (B, conv_dim, d_conv), ssm_state (B, H, head_dim, N)},
// fixed size, laid out as Hugging Face's Mamba2Cache. Runs where its weights are: the CPU
// kernels, or, for weights on a GPU, the CUDA ones (ssd_scan_cuda.h) where the build has them.
// Declared in kernels/common/mixer_registry.h: ExpectedMamba2Weights, RandomMamba2Weights,
// CreateMamba2Mixer.
#pragma once

#include "kernels/common/mixer_registry.h"

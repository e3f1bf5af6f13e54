// The `performer` mixer: multi-head attention approximated with FAVOR+ positive random
// features (Choromanski et al., 2021), computed by the linear mixer's machinery
// (causal_linear_attention_cpu.h, "OnFeatures": chunked prefix states, steps, bidirectional):
//   φ(x) = exp(ω x̂ − |x̂|²/2) / √m,  x̂ = x / d^{1/4},  ω (m × d), m = d random features,
// so that E[φ(q)·φ(k)] = exp(q·k / √d): softmax attention's kernel, estimated without bias by
// positive features (the normaliser stays > 0).
// ω: orthogonal random features, drawn once when the mixer is made, from
// MixerConfig::performer_seed (stored in the model's config, so every load and every replica
// draws the same ω; never redrawn at inference): the Q factor of a Gaussian d × d matrix, each
// row rescaled to the norm of a Gaussian d-vector (chi-distributed), one ω per layer, shared by
// the heads.
//
// Weights: the standard mixer's q_proj, k_proj, v_proj, o_proj (attention_projections.h).
// config.causal = true: streams with the linear mixer's state,
//   MixerState.tensors = {S (B, H, m, d), z (B, H, m)} of φ(k) v and φ(k) sums.
// config.causal = false: bidirectional; only Prefill with a null state.
// No stabiliser is subtracted from the exponent (a streamed key has no global maximum to take):
// the exponent is at most |ω_i|²/2 (≈ d/2), well inside float32 for head widths up to ~128.
// On CUDA (a build whose LibTorch has CUDA): the features in ATen, then the linear mixer's
// CUDA kernels with map_features = false (CausalLinearAttentionOnDevice); head_dim 64 or 128
// for prefill (the kernel's), <= 256 for steps.
#pragma once

#include "kernels/common/mixer.h"
#include "kernels/common/mixer_registry.h"

namespace attnserve::kernels {

// The feature matrix ω (d × d, float32) of `config` (its head_dim and performer_seed).
at::Tensor PerformerFeatureMatrix(const MixerConfig& config);

// φ(x) for x (..., d) with ω: (..., m), float32 (float64 in, float64 out).
at::Tensor FavorPlusFeatures(const at::Tensor& x, const at::Tensor& omega);

}  // namespace attnserve::kernels

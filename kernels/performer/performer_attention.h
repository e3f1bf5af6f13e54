// The `performer` mixer: multi-head attention approximated with FAVOR+ positive random
// features (Choromanski et al., 2021), computed by the linear mixer's machinery
// (causal_linear_attention_cpu.h, "OnFeatures": chunked prefix states, steps, bidirectional):
//   φ(x) = exp(ω x̂ − |x̂|²/2) / √m,  x̂ = x / d^{1/4},  ω (m × d), m = d random features,
// so that E[φ(q)·φ(k)] = exp(q·k / √d): softmax attention's kernel, estimated without bias by
// positive features (the normaliser stays > 0), and
//   out_t = Σ_s φ(q_t)·φ(k_s) v_s / max(Σ_s φ(q_t)·φ(k_s), FLT_MIN)
// (kPositiveNormaliserFloor, causal_linear_attention_cpu.h): nothing is added to the
// normaliser, which is e^{−|q̂|²} for a key opposite to its query and would be pulled towards 0
// by an absolute ε. Exact FAVOR+ to float32 rounding, a single token's output its value.
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
// Stabilisers: a query's features are taken as φ̃(q)_i = exp(ω_i q̂ − max_j ω_j q̂) ∈ (0, 1]:
// φ(q) times a factor of the query's own, which cancels between numerator and normaliser
// exactly (out_t is unchanged), keeps them from overflowing and keeps the normaliser as large as
// the keys allow. A key's features are φ(k) exactly: a factor per key would weight the keys
// differently, and a streamed key has no global maximum to take (the state holds Σ φ(k) v and
// Σ φ(k)). Their exponent is at most |ω_i|²/2 (≈ d/2), inside float32 for head widths up to
// ~128; it underflows for keys of large norm (|k̂|²/2 beyond ~87).
// CPU decode (Step, StepBatch): the projections once over the B rows, each (row, head)'s
// features on their own (favor_features_cpu.h) and the linear mixer's decode kernel on every
// row's S and z where they live (linear_decode_cpu.h): a row's step is bit-identical alone or
// in any batch (of up to 64 rows, skinny_gemm.h's).
// On CUDA (a build whose LibTorch has CUDA): the features in ATen, then the linear mixer's
// CUDA kernels with map_features = false (CausalLinearAttentionOnDevice); head_dim 64 or 128
// for prefill (the kernel's), <= 256 for steps; StepBatch gathers the states (to 1e-5).
#pragma once

#include "kernels/common/mixer.h"
#include "kernels/common/mixer_registry.h"

namespace attnserve::kernels {

// The feature matrix ω (d × d, float32) of `config` (its head_dim and performer_seed).
at::Tensor PerformerFeatureMatrix(const MixerConfig& config);

// φ(x) for x (..., d) with ω: (..., m), float32 (float64 in, float64 out): keys' features.
at::Tensor FavorPlusFeatures(const at::Tensor& x, const at::Tensor& omega);

// φ̃(x) = exp(ω x̂ − max_i ω_i x̂), the queries' features (φ up to a factor of each x's own).
at::Tensor FavorPlusQueryFeatures(const at::Tensor& x, const at::Tensor& omega);

}  // namespace attnserve::kernels

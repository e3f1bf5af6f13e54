// Linear attention (Katharopoulos et al., 2020) on the CPU, with the feature map
// φ(x) = elu(x) + 1 (positive, so the normaliser is > 0) and ε = 1e-6 (for features given,
// below, no ε: the normaliser is guarded by kPositiveNormaliserFloor instead):
//   causal:         o_t = φ(q_t)ᵀ S_t / (φ(q_t)ᵀ z_t + ε),
//                   S_t = S_0 + Σ_{i≤t} φ(k_i) v_iᵀ (d × d),  z_t = z_0 + Σ_{i≤t} φ(k_i) (d),
//                   i.e. position t attends to itself; (S_0, z_0) is the state carried in.
//   bidirectional:  O = φ(Q) (φ(K)ᵀ V) / (φ(Q) Σ_i φ(k_i) + ε).
// All tensors are float32 on the CPU; q, k, v are per head: (B, H, L, d).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <limits>

#include "absl/status/statusor.h"

namespace attnserve::kernels {

inline constexpr double kLinearAttentionEps = 1e-6;
// Features given (map_features = false, e.g. FAVOR+'s) are positive but may be tiny (FAVOR+'s
// products are as small as e^{-|x|²}), so an absolute ε would pull a small normaliser's output
// towards 0: the normaliser is divided as max(den, FLT_MIN) instead, which changes no positive
// normal float, and leaves an output whose every product underflowed at 0 (0 / FLT_MIN).
inline constexpr float kPositiveNormaliserFloor = std::numeric_limits<float>::min();
// Tokens per chunk of the causal prefill: within a chunk the masked quadratic form, between
// chunks the carried state.
inline constexpr int64_t kLinearAttentionChunk = 64;

struct LinearAttentionResult {
  at::Tensor out;  // (B, H, L, d), or (B, H, d) for a step
  at::Tensor s;    // (B, H, d, d): S after the last token, S[i][j] = Σ φ(k)_i v_j
  at::Tensor z;    // (B, H, d): z after the last token
};

// Causal prefill of a chunk of L >= 0 tokens continuing from (s, z) ((B, H, d, d), (B, H, d);
// zeros for a fresh sequence). The chunk is cut into blocks of `chunk` tokens; every block is
// handled at once by batched ATen calls (a fixed number of them, whatever L is): the blocks'
// state increments ΔS, Δz come from one bmm and their exclusive prefix sums (the state
// before each block) from one pass over them.
// The inputs are never modified (the result's s, z are new tensors, or for L = 0 the
// inputs themselves).
absl::StatusOr<LinearAttentionResult> CausalLinearAttentionCpu(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& s,
    const at::Tensor& z, int64_t chunk = kLinearAttentionChunk);

// One token: q, k, v (B, H, d), state (s, z) as above. out = (B, H, d); s, z are the state
// after the token (new tensors).
absl::StatusOr<LinearAttentionResult> CausalLinearAttentionStepCpu(const at::Tensor& q,
                                                                   const at::Tensor& k,
                                                                   const at::Tensor& v,
                                                                   const at::Tensor& s,
                                                                   const at::Tensor& z);

// Bidirectional form over a whole sequence: q, k, v (B, H, L, d) -> (B, H, L, d). Three
// batched products, nothing CPU-specific: it also takes CUDA tensors (all on one device).
absl::StatusOr<at::Tensor> LinearAttentionCpu(const at::Tensor& q, const at::Tensor& k,
                                              const at::Tensor& v);

// The same three, for another feature map: with map_features = false, q and k are φ(q), φ(k)
// already (positive, (B, H, L, d) like v), as the Performer's FAVOR+ features are
// (kernels/performer/), and the normaliser takes kPositiveNormaliserFloor rather than ε; true
// is the functions above.
absl::StatusOr<LinearAttentionResult> CausalLinearAttentionOnFeaturesCpu(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& s,
    const at::Tensor& z, int64_t chunk, bool map_features);
absl::StatusOr<LinearAttentionResult> CausalLinearAttentionStepOnFeaturesCpu(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& s,
    const at::Tensor& z, bool map_features);
absl::StatusOr<at::Tensor> LinearAttentionOnFeaturesCpu(const at::Tensor& q, const at::Tensor& k,
                                                        const at::Tensor& v, bool map_features);

}  // namespace attnserve::kernels

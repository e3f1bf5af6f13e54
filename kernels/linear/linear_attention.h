// The `linear` mixer: multi-head linear attention with φ(x) = elu(x) + 1
// (causal_linear_attention_cpu.h), y = o_proj(per-head linear attention of q, k, v).
//
// Weights: q_proj.weight, k_proj.weight, v_proj.weight, o_proj.weight, each
// (d_model, d_model) (attention_projections.h).
//
// config.causal = true: streams with a fixed-size state,
//   MixerState.tensors = {S (B, H, d, d), z (B, H, d)}, float32, S[i][j] = Σ φ(k)_i v_j and
//   z = Σ φ(k) over the tokens consumed; Step is O(H·d²), independent of the position.
//   Prefill and Step replace the state's tensors with new ones (never write into them).
// config.causal = false: bidirectional, φ(Q)(φ(K)ᵀV) / (φ(Q)Σφ(K) + ε); only Prefill with a
//   null state works, InitialState, Step and Prefill with a state return FailedPrecondition.
//
// The factory functions are declared in kernels/common/mixer_registry.h; callers use
// CreateMixer in mixer.h.
#pragma once

#include <vector>

#include "kernels/common/mixer.h"
#include "kernels/common/mixer_registry.h"
#include "kernels/linear/causal_linear_attention_cpu.h"
#include "kernels/linear/linear_decode_cpu.h"

namespace attnserve::kernels {

// The causal kernels where the tensors are: the CUDA ones (linear_attention_cuda_torch.h) for
// CUDA tensors when this build has them, else the CPU ones (causal_linear_attention_cpu.h).
// Shapes and state semantics as CausalLinearAttentionCpu / CausalLinearAttentionStepCpu; on
// CUDA the step updates s and z in place (made contiguous first) and returns them. With
// map_features = false, q and k are features already (the performer mixer's φ).
// A fresh state of the linear machinery for `batch` sequences: {S (B, H, d, d), z (B, H, d)}
// zeros on `device` (the linear and performer mixers' InitialState).
MixerState ZeroLinearAttentionState(int64_t batch, int64_t heads, int64_t head_dim,
                                    at::Device device);

absl::StatusOr<LinearAttentionResult> CausalLinearAttentionOnDevice(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& s,
    const at::Tensor& z, bool map_features = true);
absl::StatusOr<LinearAttentionResult> CausalLinearAttentionStepOnDevice(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& s,
    const at::Tensor& z, bool map_features = true);

// The CPU decode kernel (linear_decode_cpu.h) on states where they live, for the linear and
// performer mixers' Step and StepBatch. LinearStateRow: row `b` of a state {S (B, H, d, d),
// z (B, H, d)}, its tensors made contiguous first if they are not (the kernel writes into
// them). LinearDecodeOnRowsCpu: q, k, v (B, H, 1, d) -> heads (B, H, 1, d), rows[b] updated in
// place; with map_features = false, q and k are features already.
LinearDecodeRow LinearStateRow(MixerState& state, int64_t b);
at::Tensor LinearDecodeOnRowsCpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const std::vector<LinearDecodeRow>& rows,
                                 bool map_features = true);

}  // namespace attnserve::kernels

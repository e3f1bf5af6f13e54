// Torch-facing wrappers of the Mamba CUDA kernels (selective_scan_cuda.h,
// causal_conv1d_cuda.h): they check devices, shapes and dtypes, fill the params structs and
// launch on the current CUDA stream of the inputs' device. Built only when LibTorch has CUDA.
//
// Activations (u, delta, z, B, C, x, outputs) are float32 or bfloat16, all of one dtype;
// parameters (A, D, delta_bias, conv weight and bias) and states are float32. All tensors on
// one CUDA device. Errors throw c10::Error (the mixers convert with GuardTorch). An optional
// `out` (contiguous, of the result's shape and dtype) receives the result instead of a new
// tensor. States are updated in place.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace attnserve::kernels::mamba {

// Prefill: u, delta, z (B, L, D) (z may be undefined: no gate), b, c (B, L, N), a (D, N)
// (= -exp(A_log)), d_skip (D) or undefined, delta_bias (D) or undefined; ssm_state
// (B, D, N) float32, each sequence's (D, N) block contiguous, updated in place.
// Returns out (B, L, D).
at::Tensor SelectiveScanCuda(const at::Tensor& u, const at::Tensor& delta,
                             const at::Tensor& delta_bias, bool delta_softplus, const at::Tensor& z,
                             const at::Tensor& b, const at::Tensor& c, const at::Tensor& a,
                             const at::Tensor& d_skip, const at::Tensor& ssm_state,
                             const at::Tensor& out = {});

// Decode, one token for each of S sessions: u, delta, z (S, D), b, c (S, N); the states
// either one (S, D, N) tensor or S contiguous (D, N) tensors wherever they live. Returns
// out (S, D).
at::Tensor SelectiveStateUpdateCuda(const at::Tensor& u, const at::Tensor& delta,
                                    const at::Tensor& delta_bias, bool delta_softplus,
                                    const at::Tensor& z, const at::Tensor& b, const at::Tensor& c,
                                    const at::Tensor& a, const at::Tensor& d_skip,
                                    const at::Tensor& ssm_state, const at::Tensor& out = {});
at::Tensor SelectiveStateUpdateCuda(const at::Tensor& u, const at::Tensor& delta,
                                    const at::Tensor& delta_bias, bool delta_softplus,
                                    const at::Tensor& z, const at::Tensor& b, const at::Tensor& c,
                                    const at::Tensor& a, const at::Tensor& d_skip,
                                    const std::vector<at::Tensor>& ssm_states,
                                    const at::Tensor& out = {});

// Causal depthwise conv1d (+ SiLU when `silu`), continuing from conv_state: x (B, L, D),
// weight (D, W) float32 (conv1d.weight viewed as (D, W)), bias (D) or undefined,
// conv_state (B, D, W) float32, each sequence's block contiguous, updated in place to the
// last W inputs. Returns out (B, L, D). Decode is the same call with L = 1.
at::Tensor CausalConv1dCuda(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                            const at::Tensor& conv_state, bool silu = true,
                            const at::Tensor& out = {});

// Decode for S sessions whose states are separate (D, W) contiguous tensors: x (S, D).
// Returns out (S, D).
at::Tensor CausalConv1dUpdateCuda(const at::Tensor& x, const at::Tensor& weight,
                                  const at::Tensor& bias,
                                  const std::vector<at::Tensor>& conv_states, bool silu = true,
                                  const at::Tensor& out = {});

}  // namespace attnserve::kernels::mamba

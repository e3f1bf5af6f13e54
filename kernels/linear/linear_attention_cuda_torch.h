// Torch-facing wrappers of the linear attention CUDA kernels (linear_attention_cuda.h): they
// check devices, shapes and dtypes, fill the params structs and launch on the current CUDA
// stream of the inputs' device. Built only when LibTorch has CUDA.
//
// q, k, v and outputs are float32 or bfloat16 (one dtype); states are float32; all tensors on
// one CUDA device; head_dim 64 or 128 for prefill, <= 256 for decode. Errors throw c10::Error.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace attnserve::kernels::linear {

struct LinearAttentionCudaResult {
  at::Tensor out;  // (B, H, L, d)
  at::Tensor s;    // (B, H, d, d), S after the last token
  at::Tensor z;    // (B, H, d)
};

// Causal prefill continuing from (s, z) ((B, H, d, d), (B, H, d); zeros for a fresh sequence):
// q, k, v (B, H, L, d). The inputs are not modified: the state after the chunk goes to
// s_out, z_out when given (contiguous float32; they may be s, z themselves for an in-place
// update) or to new tensors, the output to `out` when given or to a new tensor.
// map_features = false: q and k are features already (the Performer's φ), used as they are.
LinearAttentionCudaResult CausalLinearAttentionCuda(const at::Tensor& q, const at::Tensor& k,
                                                    const at::Tensor& v, const at::Tensor& s,
                                                    const at::Tensor& z, const at::Tensor& out = {},
                                                    const at::Tensor& s_out = {},
                                                    const at::Tensor& z_out = {},
                                                    bool map_features = true);

// Decode, one token for each of S sessions: q, k, v (S, H, d); the states, updated in place,
// either batched (s (S, H, d, d), z (S, H, d), each session's block contiguous) or as
// per-session contiguous tensors (s_list[i] (H, d, d), z_list[i] (H, d)) wherever they live.
// Returns out (S, H, d) (into `out` when given).
at::Tensor CausalLinearAttentionStepCuda(const at::Tensor& q, const at::Tensor& k,
                                         const at::Tensor& v, const at::Tensor& s,
                                         const at::Tensor& z, const at::Tensor& out = {},
                                         bool map_features = true);
at::Tensor CausalLinearAttentionStepCuda(const at::Tensor& q, const at::Tensor& k,
                                         const at::Tensor& v, const std::vector<at::Tensor>& s_list,
                                         const std::vector<at::Tensor>& z_list,
                                         const at::Tensor& out = {});

}  // namespace attnserve::kernels::linear

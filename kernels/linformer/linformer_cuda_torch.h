// Torch-facing wrapper of the Linformer CUDA path (linformer_cuda.h): the four products run
// through cuBLAS on torch's cuBLAS handle for the current device (so they follow
// torch.backends.cuda.matmul.allow_tf32) and the current CUDA stream. Built only when
// LibTorch has CUDA. Float32 only; errors throw c10::Error.
#pragma once

#include <ATen/core/Tensor.h>

namespace attnserve::kernels::linformer {

// q, k, v (B, H, L, d); e, f (max_len >= L, proj), of which the first L rows are used.
// Returns softmax(q (e[:L]ᵀ k)ᵀ · scale) (f[:L]ᵀ v), (B, H, L, d) (into `out` when given);
// softmax_scale 0 means 1/sqrt(d).
at::Tensor LinformerAttentionCuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& e, const at::Tensor& f,
                                  double softmax_scale = 0.0, const at::Tensor& out = {});

}  // namespace attnserve::kernels::linformer

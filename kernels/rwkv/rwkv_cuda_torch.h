// Torch-facing wrapper of the WKV CUDA kernel (wkv_cuda.h): checks devices, shapes and dtypes,
// fills the params struct and launches on the current CUDA stream of the inputs' device.
// Built only when LibTorch has CUDA. Errors throw c10::Error.
#pragma once

#include <ATen/core/Tensor.h>

namespace attnserve::kernels::rwkv {

// wkv (B, L, A) float32 for k, v (B, L, A) float32 (last dimension contiguous), decay =
// -exp(time_decay) and first = time_first (A) float32, continuing `state` (B, 3, A) float32
// (each row's (3, A) block contiguous), which is updated in place. All on one CUDA device.
// The result goes to `out` when given (contiguous (B, L, A) float32), else to a new tensor.
at::Tensor WkvCuda(const at::Tensor& k, const at::Tensor& v, const at::Tensor& decay,
                   const at::Tensor& first, const at::Tensor& state, const at::Tensor& out = {});

}  // namespace attnserve::kernels::rwkv

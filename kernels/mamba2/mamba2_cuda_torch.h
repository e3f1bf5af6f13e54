// Torch-facing wrapper of the CUDA SSD scan (ssd_scan_cuda.h), for mamba2_mixer.cc's tensors on
// a GPU. Built only with a LibTorch that has CUDA (kernels/CMakeLists.txt); throws c10::Error
// with a message on bad input, which the mixer's GuardTorch turns into a Status.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace attnserve::kernels::mamba2 {

// xbc (B, L, H·P + 2·G·N) float32 contiguous: x, then B, then C of every token (after the conv);
// dt (B, L, H) float32, last dimension contiguous, before bias, softplus and clamp; dt_bias,
// a (= -exp(A_log)), d (H) float32; ssm_state (B, H, P, N) float32 contiguous, continued and
// updated in place. L = 1 runs the decode kernel, L > 1 the chunked prefill. Returns y + D·x
// (B, L, H·P).
at::Tensor SsdScanCuda(const at::Tensor& xbc, const at::Tensor& dt, int64_t heads, int64_t groups,
                       int64_t dstate, const at::Tensor& dt_bias, const at::Tensor& a,
                       const at::Tensor& d, double dt_min, double dt_max,
                       const at::Tensor& ssm_state);

}  // namespace attnserve::kernels::mamba2

// Tiled softmax attention where the tensors are: the CUDA kernel (flash_attention_cuda_torch.h)
// for CUDA tensors when this build has it; on the CPU the fused kernel (fused_attention_cpu.h)
// where it takes the head dimension (a multiple of 16), the tiled ATen one
// (flash_attention_cpu.h) otherwise. The
// arguments are FlashAttentionCpu's (q (B, H, Lq, d), k, v (B, H, Lk, d); causal; window and
// sinks for sliding-window attention), with the default tiles. Used by the standard and the
// sliding-window mixers.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "absl/status/statusor.h"

namespace attnserve::kernels {

absl::StatusOr<at::Tensor> FlashAttention(const at::Tensor& q, const at::Tensor& k,
                                          const at::Tensor& v, bool causal, int64_t window = 0,
                                          int64_t sinks = 0);

}  // namespace attnserve::kernels

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

// k, v may have fewer heads than q (grouped-query attention: H a multiple of Hkv, query head h
// reading key/value head h / (H / Hkv)). Every chunk the fused kernel takes goes to it, short
// ones too (it sends those to the decode kernel), so that a KV cache whose prefix is shared in
// segments (kv_cache.h, which only the fused kernel reads) computes the same bits as one that
// holds it all: a fork's outputs equal its source's. The fused and CUDA kernels read grouped
// heads in place; the tiled ATen one gets them repeated (RepeatKvHeads, a copy).
absl::StatusOr<at::Tensor> FlashAttention(const at::Tensor& q, const at::Tensor& k,
                                          const at::Tensor& v, bool causal, int64_t window = 0,
                                          int64_t sinks = 0);

// kv (B, Hkv, L, d) with each head repeated heads / Hkv times in place: (B, heads, L, d); kv itself
// when it has `heads` heads already (or a count that does not divide them).
at::Tensor RepeatKvHeads(const at::Tensor& kv, int64_t heads);

}  // namespace attnserve::kernels

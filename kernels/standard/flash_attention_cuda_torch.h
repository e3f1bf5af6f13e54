// Torch-facing wrappers of the flash attention CUDA kernels (flash_attention_cuda.h): they
// check devices, shapes and dtypes, fill the params structs and launch on the current CUDA
// stream of the inputs' device. Built only when LibTorch has CUDA.
//
// q, k, v and outputs are float32 or bfloat16 (one dtype) on one CUDA device; head_dim 64 or
// 128. softmax_scale 0 means 1/sqrt(head_dim). Errors throw c10::Error.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace attnserve::kernels::standard {

// Prefill: q (B, H, Lq, d), k, v (B, Hkv, Lk, d) (a narrowed view of a KV cache is fine; H a
// multiple of Hkv: grouped-query attention, read in place).
// causal: the queries are the last Lq of the Lk positions (query i sees keys 0 .. Lk-Lq+i);
// otherwise every query sees every key. window > 0 (causal only) and sinks: sliding-window
// attention with attention sinks, as FlashAttentionCpu (flash_attention_cpu.h) takes them.
// Returns (B, H, Lq, d) (into `out` when given).
at::Tensor FlashAttentionCuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              bool causal, double softmax_scale = 0.0, const at::Tensor& out = {},
                              int64_t window = 0, int64_t sinks = 0);

// Decode, one query token per session: q (S, H, d) attends to the first seqlens[i] keys of
// session i's cache (seqlens: int32 (S) on the device, or undefined for max_seqlen keys each;
// the new token's k, v are already in the cache). The caches are either batched
// (k_cache, v_cache (S, Hkv, capacity, d), capacity >= max_seqlen) or per-session tensors
// (k_caches[i], v_caches[i] (Hkv, capacity_i, d), rows contiguous, capacity_i >= seqlens[i]);
// H a multiple of Hkv (grouped-query attention, read in place).
// Returns (S, H, d) (into `out` when given).
at::Tensor FlashDecodeCuda(const at::Tensor& q, const at::Tensor& k_cache,
                           const at::Tensor& v_cache, const at::Tensor& seqlens, int64_t max_seqlen,
                           double softmax_scale = 0.0, const at::Tensor& out = {});
at::Tensor FlashDecodeCuda(const at::Tensor& q, const std::vector<at::Tensor>& k_caches,
                           const std::vector<at::Tensor>& v_caches, const at::Tensor& seqlens,
                           int64_t max_seqlen, double softmax_scale = 0.0,
                           const at::Tensor& out = {});

}  // namespace attnserve::kernels::standard

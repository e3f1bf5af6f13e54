// Softmax attention on the CPU in one fused pass of vector code, for the shapes where the
// tiled ATen kernel (flash_attention_cpu.h) is slowest: a chunk of a few queries over a long
// KV cache (a prefix-cache hit's 96 new tokens over 4000 cached ones took 10 ms there, ~40
// GFLOP/s: twelve ATen calls per 512-key tile, each a small matrix product).
//
// How: a task holds one (batch, head) and a block of 16 or 32 queries, kept transposed in the
// vector lanes (query i of the block in lane i), so every step of the online softmax (the
// running max, the sum, the rescale) is one vector operation over the block, and the keys and
// values are read in place, one broadcast element at a time, straight from the cache:
//   scores   sᵀ[j][i] = Σ_c k[j][c] · (q[i][c] / √d)      8 keys x 2 vectors of queries a step
//   softmax  m, l, oᵀ rescaled by exp(m_old - m_new) once per tile of 128 keys
//   values   oᵀ[c][i] += Σ_j v[j][c] · p[j][i]             8 dims x 2 vectors of queries a step
// No key or value is copied or transposed; the block's output is transposed back once.
//
// A chunk of at most 4 queries without a window, over keys laid out as a KV cache's, goes to the
// decode kernel (decode_attention_cpu.h) one query at a time instead, its keys' pieces as spans:
// blocks of 16 lanes would be mostly padding there.
//
// Masks and the skipped key tiles are FlashAttentionCpu's (causal, window, sinks): the same
// contract and the same results to float32 rounding (the additions are in another order).
// A lane whose queries see no key of a tile gets nothing from it (its p are zeroed, not
// exp(-inf - m)).
//
// Supported: float32 CPU tensors whose last dimension is contiguous, d a multiple of 16
// (FusedAttentionSupports); FlashAttention (flash_attention.h) sends those here and the
// rest to FlashAttentionCpu. Compiled for AVX-512, AVX2 and baseline x86-64, chosen at load.
// Parallel over (batch, head, query block) with ATen's intra-op threads; a block's result
// does not depend on the other blocks or on the thread count. Thread-safe.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/common/mixer.h"

namespace attnserve::kernels {

// Whether FusedAttentionCpu takes q (B, H, Lq, d) with k, v like it: CPU float32, d a positive
// multiple of 16, each tensor's last dimension contiguous.
bool FusedAttentionSupports(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

// FlashAttentionCpu's contract (q (B, H, Lq, d); k, v (B, Hkv, Lk, d), any strides but the last,
// H a multiple of Hkv: grouped-query attention, query head h reading key/value head
// h / (H / Hkv);
// causal, window, sinks; the same errors), for shapes FusedAttentionSupports accepts
// (InvalidArgument otherwise). Returns a new contiguous (B, H, Lq, d) float32 tensor.
absl::StatusOr<at::Tensor> FusedAttentionCpu(const at::Tensor& q, const at::Tensor& k,
                                             const at::Tensor& v, bool causal, int64_t window = 0,
                                             int64_t sinks = 0);

// The same over keys and values in pieces, read where they are: the `shared` segments
// (kernels/common/mixer.h's KvSegment: positions 0 .. Σ length - 1, in order; at most
// kMaxKvSegments), then k, v (B, H, Lk_own, d) for the positions after them (Lk_own may be 0):
// Lk = Σ length + Lk_own. A KV cache whose prefix other states share (kv_cache.h). Key tiles
// end at the pieces' edges; otherwise the same computation.
absl::StatusOr<at::Tensor> FusedAttentionCpu(const at::Tensor& q,
                                             const std::vector<KvSegment>& shared,
                                             const at::Tensor& k, const at::Tensor& v, bool causal,
                                             int64_t window = 0, int64_t sinks = 0);

}  // namespace attnserve::kernels

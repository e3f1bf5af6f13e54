// Softmax attention on the CPU, tiled over queries and keys with an online softmax (the
// FlashAttention recurrence: a running row max and row sum per query), so that no Lq x Lk
// matrix is ever materialised. Extra memory is O(Lq·d + B·H·tile²).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace attnserve::kernels {

// Tile sizes in tokens. Larger tiles make fewer, larger matrix products (fewer ATen calls,
// better BLAS efficiency); smaller ones keep the B·H·query·key score tile in cache. The
// defaults were measured on 2 cores at B·H = 8, d = 64, L = 4096 (256 x 512 beat 128 x 128 by
// about 1.4x and 256 x 256 by 1.1-1.2x); the score tile is then 8 · 256 · 512 floats = 4 MiB.
// Tests pass small and odd sizes to exercise every tile case on short sequences.
struct FlashAttentionTiles {
  int64_t query = 256;
  int64_t key = 512;
};

// out = softmax(q kᵀ / sqrt(d) + mask) v, per batch and head.
//   q: (B, H, Lq, d); k, v: (B, H, Lk, d); float32 CPU tensors, any strides (a narrowed view
//   of a KV cache is fine). Returns a new contiguous (B, H, Lq, d) float32 tensor.
//   causal = false: every query sees every key (Lk >= 1 when Lq >= 1).
//   causal = true: the queries are the last Lq positions of the Lk keys (a chunk after a KV
//   prefix of Lk - Lq tokens), so query i (0-based in the chunk) sees keys 0 .. Lk - Lq + i.
//   Requires Lk >= Lq.
//   window > 0 (causal only): sliding-window attention, query i also sees only the last
//   `window` keys up to its own position (keys Lk - Lq + i - window + 1 .. Lk - Lq + i); key
//   tiles wholly outside every query's window are skipped, so the cost is O(Lq · window). A
//   window of at least Lk is the same computation as none (bit for bit).
//   sinks > 0 (with a window): keys 0 .. sinks - 1 are seen by every query at or after them,
//   whatever the window (StreamingLLM's attention sinks); their tiles are visited first.
// Errors (InvalidArgument) name the tensor, the expected and the received shapes. Thread-safe:
// it touches nothing but its arguments.
// The argument checks of FlashAttentionCpu (and FusedAttentionCpu, fused_attention_cpu.h), the
// tiles aside: OK, or the InvalidArgument it returns.
absl::Status CheckFlashAttentionArguments(const at::Tensor& q, const at::Tensor& k,
                                          const at::Tensor& v, bool causal, int64_t window,
                                          int64_t sinks);
// Its checks of the lengths (Lq queries, Lk keys) and of causal, window and sinks.
absl::Status CheckAttentionLengths(int64_t lq, int64_t lk, bool causal, int64_t window,
                                   int64_t sinks);

absl::StatusOr<at::Tensor> FlashAttentionCpu(const at::Tensor& q, const at::Tensor& k,
                                             const at::Tensor& v, bool causal,
                                             FlashAttentionTiles tiles = {}, int64_t window = 0,
                                             int64_t sinks = 0);

}  // namespace attnserve::kernels

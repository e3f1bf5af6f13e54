// Sparse Transformer attention (strided or fixed pattern, sparse_key_tiles.h) on the CPU,
// tiled with an online softmax like flash_attention_cpu.h, visiting only the key tiles a block
// of queries can see: O(Lq·(l + Lk/l)·d) work for the strided pattern and O(Lq·(l + c·Lk/l)·d)
// for the fixed one (O(L·√L·d) for l ≈ √L), O(L·d) extra memory, never an Lq x Lk matrix.
//
// Two passes share one online softmax per query: the long part first (strided: in the
// residue-class layout, q, k, v regrouped by position mod l, a copy of O(L·d); fixed: the
// summary columns gathered), then the local band or block in the natural layout, starting
// from the long part's running max, sum and accumulator. Every ATen call covers all B·H
// heads at once (and, in the class layout, all l classes).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "absl/status/statusor.h"
#include "kernels/sparse/sparse_key_tiles.h"

namespace attnserve::kernels {

struct SparsePatternConfig {
  sparse::SparsePatternKind pattern = sparse::kStrided;
  int64_t stride = 128;  // l >= 1
  int64_t summary = 1;   // c, 1 <= c <= l; read by the fixed pattern only
};

// Tiles in tokens (0: chosen by the kernel). The local part's default is l x l (at least 32);
// the long part's keeps the B·H·classes x query x key score tile near 4 MiB. Tests pass small
// and odd sizes to exercise every tile case on short sequences.
struct SparseAttentionTiles {
  int64_t query = 0;
  int64_t key = 0;
  int64_t long_query = 0;
  int64_t long_key = 0;
};

// out = softmax(q kᵀ / √d + the pattern's mask) v per batch and head.
//   q (B, H, Lq, d); k, v (B, H, Lk, d): float32 tensors, any strides, on one device (the
//   CPU; CUDA tensors run the same ATen calls, untested on a GPU). Returns a new
//   contiguous (B, H, Lq, d) float32 tensor.
//   causal = true: the queries are the last Lq of the Lk positions (a chunk after a KV prefix),
//   Lk >= Lq. causal = false: Lq = Lk, every query a position of its own.
// Errors (InvalidArgument) name the argument and what was expected. Thread-safe: it touches
// nothing but its arguments.
absl::StatusOr<at::Tensor> SparseAttentionCpu(const at::Tensor& q, const at::Tensor& k,
                                              const at::Tensor& v, bool causal,
                                              const SparsePatternConfig& pattern,
                                              SparseAttentionTiles tiles = {});

}  // namespace attnserve::kernels

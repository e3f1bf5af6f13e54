// One decode step of sparse attention for B sequences whose KV caches (kernels/standard/
// kv_cache.h) have lengths of their own: row b's query is its newest token, at position
// length_b - 1, and reads only the keys its pattern shows it (causal): strided, the last l and
// every l-th before them; fixed, its block so far and the summary columns of earlier blocks.
// That is min(p + 1, l) + ⌊p / l⌋ keys (strided) or p mod l + 1 + c·⌊p / l⌋ (fixed): O(l + L/l),
// O(√L) for l ≈ √L, where standard attention reads all L. The visible keys are gathered per row
// and attended by the standard decode kernel (decode_attention_cpu.h), so a row's result does
// not depend on the others in its batch.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "kernels/sparse/sparse_attention_cpu.h"
#include "kernels/standard/kv_cache.h"

namespace attnserve::kernels {

// The positions query p (causal) sees under `pattern`, in increasing order.
std::vector<int64_t> SparseStepPositions(const SparsePatternConfig& pattern, int64_t p);

// q (B, H, 1, d) float32, rows[B] (each query the token at its row's length - 1): a new
// (B, H, 1, d) tensor of the heads' outputs. On the CPU the decode kernel runs over the
// gathered keys; on another device the same keys are attended with ATen.
at::Tensor SparseDecodeHeads(const at::Tensor& q, const std::vector<KvCacheRow>& rows,
                             const SparsePatternConfig& pattern);

}  // namespace attnserve::kernels

// Float64 references for the standard mixer and its attention kernel, written straight from
// the formulas with full (Lq x Lk) score matrices: slow and memory-hungry on purpose, so that
// they are obviously correct. For tests and benchmarks, not for serving.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <tuple>

#include "absl/status/statusor.h"
#include "kernels/common/mixer.h"

namespace attnserve::kernels {

// softmax(q kᵀ / √d + mask) v in float64. q (B, H, Lq, d), k and v (B, H, Lk, d), any
// floating dtype (converted). causal: query i sees keys 0 .. Lk - Lq + i (the queries are the
// last Lq positions). Returns (B, H, Lq, d) float64.
absl::StatusOr<at::Tensor> NaiveAttentionReference(const at::Tensor& q, const at::Tensor& k,
                                                   const at::Tensor& v, bool causal);

// The q/k/v projections of `weights` (q_proj.weight, ... as in attention_projections.h) of x
// (B, L, D) in float64, split into heads: three (B, H, L, D / H) tensors.
absl::StatusOr<std::tuple<at::Tensor, at::Tensor, at::Tensor>> ReferenceProjectQkv(
    const WeightMap& weights, const at::Tensor& x, int64_t num_heads);

// heads (B, H, L, d) -> o_proj of the concatenated heads, (B, L, H·d) float64.
at::Tensor ReferenceProjectOutput(const WeightMap& weights, const at::Tensor& heads);

// The standard mixer's output for a whole sequence x (B, L, D) (float32 or float64):
// (B, L, D) float64.
absl::StatusOr<at::Tensor> StandardAttentionReference(const WeightMap& weights, const at::Tensor& x,
                                                      int64_t num_heads, bool causal);

}  // namespace attnserve::kernels

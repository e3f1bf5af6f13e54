// Float64 reference for the rwkv mixer, from the formulas of kernels/rwkv/rwkv_block.h with
// the WKV written as its two sums (no running maximum, O(L²)):
//   wkv_t = (Σ_{i<t} e^{-(t-1-i)e^{decay} + k_i} v_i + e^{u+k_t} v_t)
//         / (Σ_{i<t} e^{-(t-1-i)e^{decay} + k_i}     + e^{u+k_t})
// Slow on purpose; float64 holds e^k for |k| up to ~700. For tests.
#pragma once

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"
#include "kernels/common/mixer.h"

namespace attnserve::kernels {

// wkv (B, L, A) float64 for k, v (B, L, A), time_decay and time_first (A) (time_decay as
// stored: the decay per step is exp(time_decay)).
at::Tensor WkvReference(const at::Tensor& time_decay, const at::Tensor& time_first,
                        const at::Tensor& k, const at::Tensor& v);

// The mixer's output (block(x) - x) for a whole sequence x (B, L, H) from a fresh state:
// (B, L, H) float64.
absl::StatusOr<at::Tensor> RwkvBlockReference(const MixerConfig& config, const WeightMap& weights,
                                              const at::Tensor& x);

}  // namespace attnserve::kernels

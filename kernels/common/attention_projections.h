// The q/k/v/o projections that the attention-style mixers (standard, linformer, linear) share.
// Weights (no biases, as in Llama-style checkpoints): q_proj.weight, k_proj.weight,
// v_proj.weight, o_proj.weight, each (d_model, d_model), applied as y = x Wᵀ.
#pragma once

#include <ATen/core/Tensor.h>

#include <tuple>
#include <vector>

#include "kernels/common/linear.h"
#include "kernels/common/mixer.h"

namespace attnserve::kernels {

std::vector<WeightSpec> AttentionProjectionSpecs(const MixerConfig& config);

// Normal(0, 1/sqrt(d_model)) weights for the four projections, drawn from `gen`.
void AddRandomAttentionProjections(const MixerConfig& config, at::Generator& gen,
                                   WeightMap* weights);

struct AttentionProjections {
  LinearWeight qkv;  // (3 * d_model, d_model): q_proj, k_proj, v_proj stacked
  LinearWeight o;    // (d_model, d_model)

  // format: see MixerConfig::weight_format.
  static AttentionProjections FromWeights(const WeightMap& weights,
                                          WeightFormat format = WeightFormat::kFloat32);
  // Where the weights live; the mixer runs there.
  at::Device device() const { return o.device(); }

  // x (B, L, D) -> q, k, v as (B, H, L, d), contiguous.
  std::tuple<at::Tensor, at::Tensor, at::Tensor> ProjectQkv(const at::Tensor& x,
                                                            int64_t num_heads) const;
  // heads (B, H, L, d) -> (B, L, D) through o_proj.
  at::Tensor ProjectOutput(const at::Tensor& heads) const;
};

}  // namespace attnserve::kernels

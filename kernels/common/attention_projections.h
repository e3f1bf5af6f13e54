// The q/k/v/o projections that the attention-style mixers (standard, linformer, linear) share.
// Weights, as in Llama-style checkpoints: q_proj.weight (H·d, D), k_proj.weight and
// v_proj.weight (Hkv·d, D), o_proj.weight (D, H·d), applied as y = x Wᵀ (+ b); with
// MixerConfig::qkv_bias q_proj.bias, k_proj.bias, v_proj.bias, with o_bias o_proj.bias, with
// qk_norm q_norm.weight and k_norm.weight (d): RMSNorms of each head's q and k. Only the
// standard mixer has Hkv < H, d != D / H, biases or q/k norms (ValidateMixerConfig); for the
// others every matrix is (D, D).
#pragma once

#include <ATen/core/Tensor.h>

#include <tuple>
#include <vector>

#include "kernels/common/linear.h"
#include "kernels/common/low_rank_adapter.h"
#include "kernels/common/mixer.h"

namespace attnserve::kernels {

std::vector<WeightSpec> AttentionProjectionSpecs(const MixerConfig& config);

// Normal(0, 1/sqrt(d_model)) weights for the four projections, drawn from `gen`.
void AddRandomAttentionProjections(const MixerConfig& config, at::Generator& gen,
                                   WeightMap* weights);

struct AttentionProjections {
  LinearWeight qkv;      // ((H + 2 Hkv) d, D): q_proj, k_proj, v_proj stacked
  LinearWeight o;        // (D, H d)
  at::Tensor qkv_bias;   // ((H + 2 Hkv) d) or undefined
  at::Tensor o_bias;     // (D) or undefined
  int64_t kv_heads = 0;  // 0: the query heads'
  int64_t head_dim = 0;  // 0: D / H
  // Added to q, k, v (stacked as qkv's rows) after the biases, or undefined: Zamba2's adapters
  // of one hybrid layer over a shared block's projections (a copy of an AttentionProjections
  // shares its matrices). Its q rows carry QueryFactor like q_proj's.
  LowRankAdapter qkv_adapter;
  // Each head's q and k RMSNormed with these weights (d), or undefined: LFM2's q_layernorm and
  // k_layernorm (before the rotary positions, which the mixers apply after ProjectQkv). q_norm
  // carries QueryFactor instead of q_proj then.
  at::Tensor q_norm, k_norm;
  double qk_norm_epsilon = 1e-5;

  // format: see MixerConfig::weight_format. Heads of D / H, as many for keys as for queries.
  static AttentionProjections FromWeights(const WeightMap& weights,
                                          WeightFormat format = WeightFormat::kFloat32);
  // The standard mixer's: the config's key/value heads and head width.
  static AttentionProjections FromConfig(const MixerConfig& config, const WeightMap& weights);
  // What FromConfig multiplies q_proj by so that the kernels' own head_dim^-1/2 gives the
  // config's attention_scale: attention_scale · √head_dim, 1 without one.
  static double QueryFactor(const MixerConfig& config);
  // Where the weights live; the mixer runs there.
  at::Device device() const { return o.device(); }

  // x (B, L, D) -> q (B, H, L, d), k, v (B, Hkv, L, d), contiguous (q and k normed with q_norm).
  std::tuple<at::Tensor, at::Tensor, at::Tensor> ProjectQkv(const at::Tensor& x,
                                                            int64_t num_heads) const;
  // heads (B, H, L, d) -> (B, L, D) through o_proj.
  at::Tensor ProjectOutput(const at::Tensor& heads) const;
};

}  // namespace attnserve::kernels

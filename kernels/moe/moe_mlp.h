// A mixture-of-experts MLP layer: a router and E gated MLPs (gated_mlp.h); each token goes to
// its top k experts (moe_router.h) and gets the weighted sum of their outputs. Transformers'
// JambaSparseMoeBlock / MixtralSparseMoeBlock, without dropped tokens.
//
// Weights (names relative to the layer's "mlp." prefix, Hugging Face's Jamba names):
//   router.weight (E, d_model)                      router.correction_bias (E) (sigmoid_topk)
//   experts.{e}.gate_proj.weight (d_ff, d_model)   experts.{e}.up_proj.weight (d_ff, d_model)
//   experts.{e}.down_proj.weight (d_model, d_ff)   (no gate_proj with gated = false)
//   shared_expert.{gate,up,down}_proj.weight of shared_d_ff > 0 likewise: a dense MLP every
//   token runs beside its experts, its output added after theirs (Nemotron-H's shared_experts,
//   Granite-4.0-H's shared_mlp)
// The router stays float32 whatever the format (its choices are discrete: bfloat16 or int8
// logits would move tokens to other experts); the experts are kept as `format`.
//
// Calls: x (..., d_model) float32 on the weights' device -> the same shape. The tokens are
// grouped by expert: each expert's matrices are read once for all the tokens (a decode step's
// rows, one per session, or a prefill chunk's) that chose it. A token's result depends on its own
// row only, whatever else is in the batch, to the bit: every product is row-invariant
// (linear.h) and a token's outputs are summed in the order of its experts' indices.
// Immutable after construction; safe to call from many threads at once.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "kernels/common/linear.h"
#include "kernels/common/mixer.h"
#include "kernels/moe/gated_mlp.h"
#include "kernels/moe/moe_router.h"

namespace attnserve::kernels {

struct MoeConfig {
  int64_t d_model = 0;
  int64_t d_ff = 0;  // each expert's width
  int64_t num_experts = 0;
  int64_t top_k = 2;
  RouterKind router = RouterKind::kSoftmaxTopK;
  MlpActivation act = MlpActivation::kSilu;  // the experts' (and the shared expert's)
  bool gated = true;        // false: plain experts, down(act(up x)) (Nemotron-H's relu2)
  int64_t shared_d_ff = 0;  // the shared expert's width; 0: none
  // sigmoid_topk's weights: divided by their sum (norm_topk_prob), times `scaling`
  // (routed_scaling_factor). moe_router.h.
  bool normalize = false;
  double scaling = 1.0;
};

class MoeMlp {
 public:
  // The weights as listed above (checked by the caller against ExpectedWeights).
  MoeMlp(const MoeConfig& config, const WeightMap& weights, WeightFormat format);

  static std::vector<WeightSpec> ExpectedWeights(const MoeConfig& config);
  // Weights drawn from `seed`: the router N(0, 1/d_model) (routing spread over the experts),
  // the experts as a dense MLP's.
  static WeightMap RandomWeights(const MoeConfig& config, uint64_t seed);

  const MoeConfig& config() const { return config_; }
  int64_t Bytes() const;
  at::Tensor operator()(const at::Tensor& x) const;

 private:
  MoeConfig config_;
  LinearWeight router_;         // float32
  at::Tensor correction_bias_;  // (E) float32 on the CPU, sigmoid_topk's; else undefined
  std::vector<GatedMlp> experts_;
  GatedMlp shared_;  // undefined without a shared expert
};

}  // namespace attnserve::kernels

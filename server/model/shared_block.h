// The shared transformer blocks of Zamba (transformers' ZambaAttentionDecoderLayer) and Zamba2
// (Zamba2AttentionDecoderLayer): attention + MLP blocks whose weights the hybrid layers share,
// each use with its own KV cache (a slot of its own in ModelState::layers). For hidden state x
// and the model's input embeddings x0, a hybrid layer computes
//   t = MLP(mlp_norm(attention(norm(concat(x, x0)))))      (no residual inside the block)
//   x + mixer(layer norm(x + shared_linear · t))            (the layer's own mixer, e.g. Mamba)
// Config (proto/attnserve/v1/model_config.proto): shared_block_layers marks the layers;
// num_shared_blocks K (Zamba2's num_mem_blocks; the j-th marked layer runs block j % K);
// num_heads, num_key_value_heads, head_dim, attention_scale, the rotary positions (rope_theta
// > 0: Zamba2's use_mem_rope), intermediate_size and hidden_act are the blocks' (attention
// reads 2·hidden_size and writes hidden_size); the layers then have no MLP of their own.
// Adapter ranks > 0 give each marked layer its own low-rank adapters (kernels/common/
// low_rank_adapter.h) on its block's q, k, v and on its MLP's gate and up projections: the
// block's matrices are kept once, the adapters per layer.
// Weights (Model's names), for b < K and each marked layer i:
//   backbone.shared.{b}.norm.weight (2·hidden)   backbone.shared.{b}.mixer.{q,k,v,o}_proj.weight
//   backbone.shared.{b}.mlp_norm.weight (hidden) backbone.shared.{b}.mlp.{gate,up,down}_proj.weight
//   backbone.layers.{i}.shared_linear.weight (hidden, hidden)        (Model's, not listed here)
//   backbone.layers.{i}.shared_adapter.{q,k,v}_proj.down.weight (r, 2·hidden), .up.weight
//     (q, k or v's width, r)                                        (shared_attention_adapter_rank
//     r)
//   backbone.layers.{i}.shared_adapter.gate_up_proj.down.weight (r, hidden), .up.weight
//     (2·intermediate_size, r), gate rows first                     (shared_mlp_adapter_rank r)
// A SharedBlock is one marked layer's use of its block. Immutable after Create; safe to call
// from many threads at once with distinct states.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "attnserve/v1/model_config.pb.h"
#include "kernels/common/mixer.h"
#include "kernels/moe/gated_mlp.h"

namespace attnserve::model {

// Whether any layer runs a shared block (config.shared_block_layers).
bool UsesSharedBlock(const v1::ModelConfig& config);
bool LayerUsesSharedBlock(const v1::ModelConfig& config, int layer);
// num_shared_blocks, at least 1.
int64_t SharedBlockCount(const v1::ModelConfig& config);

class SharedBlock {
 public:
  // The blocks' attention: standard, reading 2·hidden_size, writing hidden_size.
  static kernels::MixerConfig AttentionConfig(const v1::ModelConfig& config);
  // The blocks' tensors and the layers' adapters (not the layers' shared_linear), with shapes.
  static std::vector<kernels::WeightSpec> ExpectedTensors(const v1::ModelConfig& config);
  static void AddRandomWeights(const v1::ModelConfig& config, uint64_t seed,
                               std::map<std::string, at::Tensor>* weights);
  // Each marked layer's use, in layer order, from the model's checked weights
  // (ExpectedTensors' names).
  static absl::StatusOr<std::vector<std::unique_ptr<SharedBlock>>> CreateUses(
      const v1::ModelConfig& config, const std::map<std::string, at::Tensor>& weights,
      kernels::WeightFormat format, at::ScalarType kv_cache_dtype);

  const kernels::Mixer& attention() const { return *attention_; }
  // t (B, L, hidden) for x, x0 (B, L, hidden), continuing `state` (the layer's attention slot;
  // null: a whole sequence).
  absl::StatusOr<at::Tensor> Prefill(const at::Tensor& x, const at::Tensor& x0,
                                     kernels::MixerState* state) const;
  // t (B, hidden) for one token of each of B sessions: x, x0 (B, hidden), states[i] row i's slot.
  absl::StatusOr<at::Tensor> StepBatch(const at::Tensor& x, const at::Tensor& x0,
                                       const std::vector<kernels::MixerState*>& states) const;

 private:
  // The attention's input, norm(concat(x, x0)); the block's output, MLP(mlp_norm(attended)).
  at::Tensor Input(const at::Tensor& x, const at::Tensor& x0) const;
  at::Tensor Output(const at::Tensor& attended) const;

  at::Tensor norm_, mlp_norm_;  // the block's RMSNorm weights (2·hidden), (hidden)
  double epsilon_ = 0;
  std::unique_ptr<kernels::Mixer> attention_;  // the block's projections, this use's adapter
  kernels::GatedMlp mlp_;                      // likewise
};

}  // namespace attnserve::model

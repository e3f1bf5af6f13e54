// Zamba's shared transformer block (transformers' ZambaAttentionDecoderLayer used by HybridLayer):
// one attention + MLP block whose weights every hybrid layer shares, each with its own KV cache
// (a slot of its own in ModelState::layers) and its own `shared_linear`. For hidden state x and
// the model's input embeddings x0, a hybrid layer computes
//   t = MLP(mlp_norm(attention(norm(concat(x, x0)))))      (no residual inside the block)
//   x + mixer(layer norm(x + shared_linear · t))            (the layer's own mixer, e.g. Mamba)
// Config (proto/attnserve/v1/model_config.proto): shared_block_layers marks the layers;
// num_heads, num_key_value_heads, head_dim, attention_scale, intermediate_size, hidden_act are the
// block's (its attention reads 2·hidden_size and writes hidden_size, no positions); the layers
// then have no MLP of their own. Weights (Model's names):
//   backbone.shared.norm.weight (2·hidden)       backbone.shared.mixer.{q,k,v,o}_proj.weight
//   backbone.shared.mlp_norm.weight (hidden)     backbone.shared.mlp.{gate,up,down}_proj.weight
//   backbone.layers.{i}.shared_linear.weight (hidden, hidden), each marked layer i
// Immutable after Create; safe to call from many threads at once with distinct states.
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

// Whether any layer runs the shared block (config.shared_block_layers).
bool UsesSharedBlock(const v1::ModelConfig& config);
bool LayerUsesSharedBlock(const v1::ModelConfig& config, int layer);

class SharedBlock {
 public:
  // The block's attention: standard, reading 2·hidden_size, writing hidden_size, no positions.
  static kernels::MixerConfig AttentionConfig(const v1::ModelConfig& config);
  // The block's tensors (not the layers' shared_linear), with their shapes.
  static std::vector<kernels::WeightSpec> ExpectedTensors(const v1::ModelConfig& config);
  static void AddRandomWeights(const v1::ModelConfig& config, uint64_t seed,
                               std::map<std::string, at::Tensor>* weights);
  // From the model's checked weights (ExpectedTensors' names).
  static absl::StatusOr<std::unique_ptr<SharedBlock>> Create(
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

  at::Tensor norm_, mlp_norm_;  // RMSNorm weights (2·hidden), (hidden)
  double epsilon_ = 0;
  std::unique_ptr<kernels::Mixer> attention_;
  kernels::GatedMlp mlp_;
};

}  // namespace attnserve::model

// What each layer of a model holds beyond its mixer (model.h): whether it has an MLP
// (ModelConfig.mlp_layers; Nemotron-H's blocks hold a mixer or an MLP), a second mixer beside its
// own (ModelConfig.parallel_layers; Falcon-H1's attention beside Mamba-2), and how a mamba2
// layer's scan output meets its gate (ModelConfig.ssm_norm).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "attnserve/v1/model_config.pb.h"
#include "kernels/common/mixer.h"

namespace attnserve::model {

// "backbone.layers.{i}.", the prefix of layer i's tensors.
std::string LayerPrefix(int i);

// Whether a layer with a mixer of `kind` has the model's norm before it (its `norm`): not for a
// mixer that owns its norms (rwkv) or none (whose layer has only its MLP and mlp_norm).
bool HasOwnNorm(kernels::MixerKind kind);

// Whether layer `layer` has an MLP (dense or experts): intermediate_size > 0, no shared block
// (whose MLP is the block's), a mixer that does not own its norms, and mlp_layers empty or
// marking the layer.
bool LayerHasMlp(const v1::ModelConfig& config, int layer);

// Whether layer `layer` has a parallel mixer (parallel_layers[layer] non-empty).
bool LayerHasParallelMixer(const v1::ModelConfig& config, int layer);

// The kernels' config of layer `layer`'s parallel mixer (LayerHasParallelMixer).
kernels::MixerConfig ParallelMixerConfig(const v1::ModelConfig& config, int layer);

// ModelConfig.ssm_norm: "" or "gate_then_norm", "norm_then_gate", "gate".
absl::StatusOr<kernels::MixerConfig::SsmNorm> ParseSsmNorm(const std::string& name);

// mlp_layers and parallel_layers have one entry per layer or none; a "none" layer has an MLP
// and no parallel mixer; a parallel mixer is a known kind other than none, beside a mixer that
// does not own its norms, and not where a shared block is; ssm_norm parses and ssm_inner_size
// >= 0. Each message names the field.
absl::Status ValidateLayerLayout(const v1::ModelConfig& config);

}  // namespace attnserve::model

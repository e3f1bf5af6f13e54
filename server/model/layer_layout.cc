#include "server/model/layer_layout.h"

#include "absl/strings/str_cat.h"
#include "server/model/model_config.h"
#include "server/model/shared_block.h"

namespace attnserve::model {

std::string LayerPrefix(int i) { return absl::StrCat("backbone.layers.", i, "."); }

bool HasOwnNorm(kernels::MixerKind kind) {
  return !kernels::MixerOwnsNorms(kind) && kind != kernels::MixerKind::kNone;
}

bool LayerHasMlp(const v1::ModelConfig& c, int layer) {
  if (c.intermediate_size() <= 0 || UsesSharedBlock(c)) return false;
  if (kernels::MixerOwnsNorms(LayerMixerConfig(c, layer).kind)) return false;
  return c.mlp_layers_size() == 0 || (layer < c.mlp_layers_size() && c.mlp_layers(layer));
}

bool LayerHasParallelMixer(const v1::ModelConfig& c, int layer) {
  return layer < c.parallel_layers_size() && !c.parallel_layers(layer).empty();
}

kernels::MixerConfig ParallelMixerConfig(const v1::ModelConfig& c, int layer) {
  return MixerConfigOf(c, layer, c.parallel_layers(layer));
}

absl::StatusOr<kernels::MixerConfig::SsmNorm> ParseSsmNorm(const std::string& name) {
  using SsmNorm = kernels::MixerConfig::SsmNorm;
  if (name.empty() || name == "gate_then_norm") return SsmNorm::kGateThenNorm;
  if (name == "norm_then_gate") return SsmNorm::kNormThenGate;
  if (name == "gate") return SsmNorm::kGateOnly;
  return absl::InvalidArgumentError(absl::StrCat(
      "config: ssm_norm must be \"gate_then_norm\" (or empty), \"norm_then_gate\" or \"gate\", "
      "got \"",
      name, "\""));
}

absl::Status ValidateLayerLayout(const v1::ModelConfig& c) {
  const int layers = c.layers_size();
  for (auto [field, size] : {std::pair<const char*, int>{"mlp_layers", c.mlp_layers_size()},
                             {"parallel_layers", c.parallel_layers_size()}}) {
    if (size != 0 && size != layers) {
      return absl::InvalidArgumentError(absl::StrCat("config: ", field, " has ", size,
                                                     " entries for ", layers,
                                                     " layers (one per layer, or none)"));
    }
  }
  if (absl::StatusOr<kernels::MixerConfig::SsmNorm> n = ParseSsmNorm(c.ssm_norm()); !n.ok()) {
    return n.status();
  }
  if (c.ssm_inner_size() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config: ssm_inner_size must be >= 0 (0: expand · hidden_size), got ", c.ssm_inner_size()));
  }
  for (int i = 0; i < layers; ++i) {
    const bool none = c.layers(i) == "none";
    if (none && !LayerHasMlp(c, i)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config: layers[", i, "] is none and has no MLP (intermediate_size > 0 and mlp_layers)"));
    }
    if (!LayerHasParallelMixer(c, i)) continue;
    const std::string& kind = c.parallel_layers(i);
    absl::StatusOr<kernels::MixerKind> parsed = kernels::ParseMixerKind(kind);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("config: parallel_layers[", i, "]: ", parsed.status().message()));
    }
    if (*parsed == kernels::MixerKind::kNone || kernels::MixerOwnsNorms(*parsed) || none ||
        kernels::MixerOwnsNorms(LayerMixerConfig(c, i).kind) || LayerUsesSharedBlock(c, i)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config: parallel_layers[", i, "] is ", kind, " beside layers[", i, "] ", c.layers(i),
          ": a parallel mixer is neither none nor rwkv, and sits beside a mixer (not none or "
          "rwkv) in a layer without a shared block"));
    }
    if (absl::Status s = kernels::ValidateMixerConfig(ParallelMixerConfig(c, i)); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("config: parallel_layers[", i, "] (", kind, "): ", s.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace attnserve::model

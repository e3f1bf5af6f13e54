// Model configs: parsing config.json (attnserve's schema or a Hugging Face Mamba config),
// defaults, validation, and the mixer config of each layer.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "attnserve/v1/model_config.pb.h"
#include "kernels/common/mixer.h"
#include "kernels/moe/moe_mlp.h"

namespace attnserve::model {

// Parses config.json. A model_type of a registered Hugging Face architecture (mamba, mamba2,
// falcon_mamba, rwkv, llama, ...: architectures/architecture.h) is read by that architecture's
// reader; a config.json with no model_type but d_model and n_layer is mamba_ssm's own
// (architectures/mamba_ssm.cc); any other is attnserve's ModelConfig, unknown fields ignored.
// NaN and Infinity are read as Python's json writes them. The result has its defaults filled
// in and is validated.
absl::StatusOr<v1::ModelConfig> ParseModelConfigJson(const std::string& json);

// Fills the fields left at zero with their defaults (norm_epsilon 1e-5, state_size 16, ...).
void FillModelConfigDefaults(v1::ModelConfig* config);

// Checks sizes, layer names and that every layer's mixer config is valid.
absl::Status ValidateModelConfig(const v1::ModelConfig& config);

// The kernels' config of layer `layer` (its mixer kind must parse; see ValidateModelConfig).
// Its norm_epsilon is RwkvLayerNormEpsilon's for an rwkv layer.
kernels::MixerConfig LayerMixerConfig(const v1::ModelConfig& config, int layer);
// The same for a mixer of kind `kind` in layer `layer` (a parallel mixer: layer_layout.h).
kernels::MixerConfig MixerConfigOf(const v1::ModelConfig& config, int layer,
                                   const std::string& kind);

// Whether layer `layer`'s MLP is a mixture of experts (num_experts > 0 and expert_layers marks
// it, or expert_layers is empty; the layer has an MLP: intermediate_size > 0).
bool LayerHasExperts(const v1::ModelConfig& config, int layer);

// The experts' config of the layers that have them (moe_router must parse: ValidateModelConfig).
kernels::MoeConfig LayerMoeConfig(const v1::ModelConfig& config);

// The rotary positions of the config's standard layers (disabled when rope_theta is 0).
kernels::RotaryConfig RotaryConfigOf(const v1::ModelConfig& config);

// Hugging Face's rescale_every (config.rwkv_rescale_every = r > 0), as transformers' inference
// computes it: the hidden state is halved after blocks r-1, 2r-1, ..., and block i's
// attention.output and feed_forward.value weights are divided by 2^(i / r). Block i then reads
// and adds to the residual stream scaled by s = 2^-(i / r) and nothing else changes, since the
// stream enters a block only through its LayerNorms, and LayerNorm(s·x; ε) = LayerNorm(x; ε/s²).
// attnserve computes the same numbers with nothing scaled: block i's ln1 and ln2 take
// ε·4^(i / r) and the final norm its ε·4^(L / r) (L blocks; ⌊L / r⌋ halvings before ln_out).
// Multiplying by powers of two is exact in floating point, so both forms round alike.
// The epsilon of layer `layer`'s ln1 and ln2:
double RwkvLayerNormEpsilon(const v1::ModelConfig& config, int layer);
// The epsilon of the final norm (backbone.norm_f): final_norm_epsilon (0: norm_epsilon), times
// 4^(L / r) with rwkv_rescale_every r > 0. Every other norm of the model's takes norm_epsilon.
double FinalNormEpsilon(const v1::ModelConfig& config);

// attnserve's config.json for `config`.
std::string ModelConfigToJson(const v1::ModelConfig& config);

// True when the model is a plain Mamba stack that Hugging Face's MambaForCausalLM can load.
bool IsHuggingFaceMamba(const v1::ModelConfig& config);

// Hugging Face's config.json for a model for which IsHuggingFaceMamba holds.
std::string HuggingFaceMambaConfigJson(const v1::ModelConfig& config);

// Whether the model's own norms are LayerNorms with a bias (config.norm "layer_norm").
bool UsesLayerNorm(const v1::ModelConfig& config);

// True when the model is a plain RWKV-4 stack (rwkv layers, LayerNorms, an embedding norm,
// a final norm with epsilon 1e-5 before rescaling: ln_out's) that Hugging Face's
// RwkvForCausalLM can load.
bool IsHuggingFaceRwkv(const v1::ModelConfig& config);

// Hugging Face's config.json for a model for which IsHuggingFaceRwkv holds.
std::string HuggingFaceRwkvConfigJson(const v1::ModelConfig& config);

}  // namespace attnserve::model

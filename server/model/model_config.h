// Model configs: parsing config.json (attnserve's schema or a Hugging Face Mamba config),
// defaults, validation, and the mixer config of each layer.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "attnserve/v1/model_config.pb.h"
#include "kernels/common/mixer.h"

namespace attnserve::model {

// Parses config.json. With "model_type": "mamba" it reads Hugging Face's MambaConfig fields
// (hidden_size, num_hidden_layers, state_size, conv_kernel, expand, time_step_rank,
// vocab_size, layer_norm_epsilon, tie_word_embeddings); with "rwkv" its RwkvConfig's
// (hidden_size, num_hidden_layers, attention_hidden_size, intermediate_size, vocab_size,
// layer_norm_epsilon, tie_word_embeddings): rwkv layers, LayerNorms, an embedding norm;
// otherwise attnserve's ModelConfig.
// Unknown fields are ignored. The result has its defaults filled in and is validated.
absl::StatusOr<v1::ModelConfig> ParseModelConfigJson(const std::string& json);

// Fills the fields left at zero with their defaults (norm_epsilon 1e-5, state_size 16, ...).
void FillModelConfigDefaults(v1::ModelConfig* config);

// Checks sizes, layer names and that every layer's mixer config is valid.
absl::Status ValidateModelConfig(const v1::ModelConfig& config);

// The kernels' config of layer `layer` (its mixer kind must parse; see ValidateModelConfig).
kernels::MixerConfig LayerMixerConfig(const v1::ModelConfig& config, int layer);

// attnserve's config.json for `config`.
std::string ModelConfigToJson(const v1::ModelConfig& config);

// True when the model is a plain Mamba stack that Hugging Face's MambaForCausalLM can load.
bool IsHuggingFaceMamba(const v1::ModelConfig& config);

// Hugging Face's config.json for a model for which IsHuggingFaceMamba holds.
std::string HuggingFaceMambaConfigJson(const v1::ModelConfig& config);

// Whether the model's own norms are LayerNorms with a bias (config.norm "layer_norm").
bool UsesLayerNorm(const v1::ModelConfig& config);

// True when the model is a plain RWKV-4 stack (rwkv layers, LayerNorms, an embedding norm)
// that Hugging Face's RwkvForCausalLM can load.
bool IsHuggingFaceRwkv(const v1::ModelConfig& config);

// Hugging Face's config.json for a model for which IsHuggingFaceRwkv holds.
std::string HuggingFaceRwkvConfigJson(const v1::ModelConfig& config);

}  // namespace attnserve::model

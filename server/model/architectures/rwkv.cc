// RwkvForCausalLM (model_type "rwkv", RWKV-4): transformers v4.47.1,
// src/transformers/models/rwkv/{configuration,modeling}_rwkv.py, commit
// 241c04d36867259cdf11dbb4e9d9a60f9cb65ebc. Every layer the rwkv block (kernels/rwkv/: its own
// LayerNorms and channel mixing), an embedding LayerNorm (blocks.0.pre_ln), the final ln_out
// (nn.LayerNorm's default epsilon 1e-5 whatever layer_norm_epsilon says), rescale_every as
// transformers' inference computes it (model_config.h).
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kernels/common/status_macros.h"
#include "server/model/architectures/architecture.h"

namespace attnserve::model::architectures {
namespace {

// transformers' RwkvModel.ln_out: nn.LayerNorm(hidden_size), PyTorch's default epsilon.
constexpr double kLnOutEpsilon = 1e-5;

// Hugging Face's RwkvConfig: hidden_size, num_hidden_layers, attention_hidden_size (null:
// hidden_size), intermediate_size (null: 4 * hidden_size), layer_norm_epsilon (pre_ln, ln1,
// ln2; ln_out keeps 1e-5), rescale_every (6 by default; <= 0: never), vocab_size,
// tie_word_embeddings (false by default). context_length is the training context, not a limit
// of the recurrence.
absl::StatusOr<v1::ModelConfig> ReadRwkvConfig(const ConfigJson& json) {
  v1::ModelConfig c;
  c.set_model_type("rwkv");
  ASSIGN_OR_RETURN(const int64_t hidden, IntKey(json, "hidden_size", 4096));
  ASSIGN_OR_RETURN(const int64_t layers, LayerCount(json, "num_hidden_layers", 32));
  ASSIGN_OR_RETURN(const int64_t vocab, IntKey(json, "vocab_size", 50277));
  ASSIGN_OR_RETURN(const int64_t attention, IntKey(json, "attention_hidden_size", 0));
  ASSIGN_OR_RETURN(const int64_t ffn, IntKey(json, "intermediate_size", 0));
  c.set_hidden_size(hidden);
  c.set_vocab_size(vocab);
  c.set_rwkv_attention_size(attention > 0 ? attention : hidden);
  c.set_intermediate_size(ffn > 0 ? ffn : 4 * hidden);
  for (int64_t i = 0; i < layers; ++i) c.add_layers("rwkv");
  c.set_norm("layer_norm");
  c.set_embedding_norm(true);
  ASSIGN_OR_RETURN(const double eps, NumberKey(json, "layer_norm_epsilon", 1e-5));
  c.set_norm_epsilon(eps);
  c.set_final_norm_epsilon(kLnOutEpsilon);
  ASSIGN_OR_RETURN(const int64_t rescale_every, IntKey(json, "rescale_every", 6));
  c.set_rwkv_rescale_every(std::max<int64_t>(0, rescale_every));
  ASSIGN_OR_RETURN(const bool tie, BoolKey(json, "tie_word_embeddings", false));
  c.set_tie_word_embeddings(tie);
  return c;
}

// Hugging Face's names for Model's (model.h); the block's own tensors keep their names under
// the layer's mixer (kernels/rwkv/rwkv_block.h).
constexpr std::pair<const char*, const char*> kPrefixes[] = {
    {"rwkv.embeddings.", "backbone.embeddings."},
    {"rwkv.blocks.0.pre_ln.", "backbone.embeddings_norm."},
    {"rwkv.ln_out.", "backbone.norm_f."},
    {"head.", "lm_head."},
};

// "rwkv.blocks.N.x" <-> "backbone.layers.N.mixer.x" (N's digits up to the next dot).
std::string ReplaceLayerPrefix(const std::string& name, absl::string_view from,
                               absl::string_view from_tail, absl::string_view to,
                               absl::string_view to_tail) {
  if (!absl::StartsWith(name, from)) return name;
  const size_t dot = name.find('.', from.size());
  if (dot == std::string::npos || dot == from.size()) return name;
  const std::string rest = name.substr(dot + 1);
  if (!absl::StartsWith(rest, from_tail)) return name;
  return absl::StrCat(to, name.substr(from.size(), dot - from.size()), ".", to_tail,
                      rest.substr(from_tail.size()));
}

std::string RwkvModelName(const std::string& stored) {
  for (const auto& [hf, ours] : kPrefixes) {
    if (absl::StartsWith(stored, hf)) return absl::StrCat(ours, stored.substr(strlen(hf)));
  }
  return ReplaceLayerPrefix(stored, "rwkv.blocks.", "", "backbone.layers.", "mixer.");
}

std::string RwkvStoredName(const std::string& name) {
  for (const auto& [hf, ours] : kPrefixes) {
    if (absl::StartsWith(name, ours)) return absl::StrCat(hf, name.substr(strlen(ours)));
  }
  return ReplaceLayerPrefix(name, "backbone.layers.", "mixer.", "rwkv.blocks.", "");
}

}  // namespace

extern const Architecture kRwkv = {"rwkv", "RwkvForCausalLM", &ReadRwkvConfig, &RwkvModelName,
                                   &RwkvStoredName};

}  // namespace attnserve::model::architectures

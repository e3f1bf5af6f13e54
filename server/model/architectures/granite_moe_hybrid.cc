// GraniteMoeHybridForCausalLM (model_type "granitemoehybrid": IBM's Granite-4.0-H, the 350M and
// 1B nano models, 3B micro, 7B-A1B tiny): transformers'
// src/transformers/models/granitemoehybrid/modeling_granitemoehybrid.py at commit
// 1c0ff25f4cc9d0e13e0bd848a43a964a8ae1ba8e and configuration_granitemoehybrid.py at
// 008f5c8c29be84d4721dc6d1e0fcd72300580be4 (transformers 4.47.1 has neither). Layer i is
// `layer_types[i]`: "mamba" (the mamba2 mixer: mamba_n_heads heads of mamba_d_head, one group)
// or "attention" (standard GQA; rotary positions only where position_embedding_type is "rope";
// scores scaled by attention_multiplier), each followed by the shared MLP (shared_mlp: a SwiGLU of
// shared_intermediate_size, input_linear holding gate then up) and, with num_local_experts > 0,
// the experts beside it (block_sparse_moe: GraniteMoeHybridTopKGating's top k logits softmaxed
// over the k, stacked expert tensors input_linear (E, 2I, hidden) and output_linear (E, hidden,
// I)). The input embeddings are times embedding_multiplier, each mixer's and MLP's output times
// residual_multiplier before it joins the residual, the logits divided by logits_scaling.
// RMSNorms (input_layernorm, post_attention_layernorm, model.norm); lm_head tied or not.
//
// Refused by name: a layer type other than mamba or attention, position_embedding_type other
// than nope (null) or rope, a hidden_act other than silu, and ReadMambaNKeys' (mamba.h).
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "kernels/common/status_macros.h"
#include "server/model/architectures/architecture.h"
#include "server/model/architectures/decoder_only.h"
#include "server/model/architectures/mamba.h"
#include "server/model/architectures/tensor_names.h"

namespace attnserve::model::architectures {
namespace {

absl::StatusOr<v1::ModelConfig> ReadGraniteMoeHybridConfig(const ConfigJson& json) {
  DecoderDefaults defaults;  // GraniteMoeHybridConfig's
  defaults.rms_norm_eps = 1e-6;
  ASSIGN_OR_RETURN(v1::ModelConfig c, ReadDecoderOnlyConfig(json, defaults));
  c.set_model_type("granitemoehybrid");
  ASSIGN_OR_RETURN(const std::string act, StringKey(json, "hidden_act", "silu"));
  if (act != "silu") return Unsupported("hidden_act", act, "silu is (the shared MLP's SwiGLU)");
  ASSIGN_OR_RETURN(const std::string positions, StringKey(json, "position_embedding_type", "nope"));
  if (positions != "nope" && positions != "rope") {
    return Unsupported("position_embedding_type", positions, "nope (null) and rope are");
  }
  if (positions == "nope") {  // no rotary positions; the context is max_position_embeddings
    c.set_rope_theta(0);
    c.set_partial_rotary_factor(0);
    c.clear_rope_scaling();
    c.set_max_sequence_length(c.max_position_embeddings());
  }
  ASSIGN_OR_RETURN(const double attention, NumberKey(json, "attention_multiplier", 1.0));
  ASSIGN_OR_RETURN(const double embedding, NumberKey(json, "embedding_multiplier", 1.0));
  ASSIGN_OR_RETURN(const double residual, NumberKey(json, "residual_multiplier", 1.0));
  ASSIGN_OR_RETURN(const double logits, NumberKey(json, "logits_scaling", 1.0));
  for (auto [key, value] : {std::pair<const char*, double>{"attention_multiplier", attention},
                            {"embedding_multiplier", embedding},
                            {"residual_multiplier", residual},
                            {"logits_scaling", logits}}) {
    if (!(value > 0)) return Unsupported(key, absl::StrCat(value), "it must be > 0");
  }
  c.set_attention_scale(attention);
  c.set_embedding_multiplier(embedding);
  c.set_residual_multiplier(residual);
  c.set_logits_divisor(logits);

  const int64_t layers = c.layers_size();
  ASSIGN_OR_RETURN(std::vector<std::string> types, StringListKey(json, "layer_types"));
  if (types.empty()) types.assign(layers, "mamba");
  if (static_cast<int64_t>(types.size()) != layers) {
    return Unsupported("layer_types", absl::StrCat(types.size(), " entries"),
                       absl::StrCat("one per layer: ", layers));
  }
  c.clear_layers();
  for (const std::string& type : types) {
    if (type != "mamba" && type != "attention") {
      return Unsupported("layer_types", type, "mamba and attention are");
    }
    c.add_layers(type == "mamba" ? "mamba2" : "standard");
  }
  RETURN_IF_ERROR(ReadMambaNKeys(json, &c));

  // The MLP: the shared one alone, or the experts beside it.
  ASSIGN_OR_RETURN(const int64_t experts, IntKey(json, "num_local_experts", 8));
  ASSIGN_OR_RETURN(const int64_t top_k, IntKey(json, "num_experts_per_tok", 2));
  ASSIGN_OR_RETURN(const int64_t shared, IntKey(json, "shared_intermediate_size", 1024));
  if (shared <= 0) {
    return Unsupported("shared_intermediate_size", absl::StrCat(shared), "it must be > 0");
  }
  if (experts > 0) {
    c.set_num_experts(experts);
    c.set_num_experts_per_tok(top_k);
    c.set_moe_router("topk_softmax");
    c.set_moe_shared_expert_size(shared);
  } else {
    c.set_intermediate_size(shared);
  }
  return c;
}

// The layer's MLP tensors: block_sparse_moe.* (the experts, split from their stacks) and
// shared_mlp.* (the shared expert beside them, or the dense MLP alone).
std::vector<TensorPart> MlpTensors(const std::string& layer, absl::string_view rest,
                                   const v1::ModelConfig& c, const std::string& stored) {
  const bool moe = c.num_experts() > 0;
  const std::string mlp = layer + "mlp.";
  if (rest == "block_sparse_moe.router.layer.weight" && moe) return {{mlp + "router.weight"}};
  const int64_t width = c.intermediate_size();  // the experts'
  if (rest == "block_sparse_moe.input_linear.weight" && moe) {
    std::vector<TensorPart> parts;
    for (int64_t e = 0; e < c.num_experts(); ++e) {
      const std::string expert = absl::StrCat(mlp, "experts.", e, ".");
      parts.push_back({expert + "gate_proj.weight", 0, 0, width, e});
      parts.push_back({expert + "up_proj.weight", 0, width, width, e});
    }
    return parts;
  }
  if (rest == "block_sparse_moe.output_linear.weight" && moe) {
    std::vector<TensorPart> parts;
    for (int64_t e = 0; e < c.num_experts(); ++e) {
      parts.push_back({absl::StrCat(mlp, "experts.", e, ".down_proj.weight"), 0, 0, -1, e});
    }
    return parts;
  }
  const std::string shared = moe ? mlp + "shared_expert." : mlp;
  const int64_t shared_width = moe ? c.moe_shared_expert_size() : c.intermediate_size();
  if (rest == "shared_mlp.input_linear.weight") {  // gate rows, then up rows
    return {{shared + "gate_proj.weight", 0, 0, shared_width},
            {shared + "up_proj.weight", 0, shared_width, shared_width}};
  }
  if (rest == "shared_mlp.output_linear.weight") return {{shared + "down_proj.weight"}};
  return {{stored}};  // unexpected
}

// model.embed_tokens -> backbone.embeddings, model.norm -> backbone.norm_f;
// model.layers.N.{input_layernorm -> norm, post_attention_layernorm -> mlp_norm, mamba.* and
// self_attn.* -> mixer.*}, and the MLP's (MlpTensors).
std::vector<TensorPart> GraniteMoeHybridTensors(const std::string& stored,
                                                const v1::ModelConfig& c) {
  if (stored == "model.embed_tokens.weight") return {{"backbone.embeddings.weight"}};
  if (stored == "model.norm.weight") return {{"backbone.norm_f.weight"}};
  if (stored == "lm_head.weight") return {{stored}};
  int layer = -1;
  absl::string_view rest;
  if (!SplitLayerName(stored, &layer, &rest)) return {{stored}};
  const std::string ours = absl::StrCat("backbone.layers.", layer, ".");
  if (rest == "input_layernorm.weight") return {{ours + "norm.weight"}};
  if (rest == "post_attention_layernorm.weight") return {{ours + "mlp_norm.weight"}};
  if (absl::ConsumePrefix(&rest, "mamba.") || absl::ConsumePrefix(&rest, "self_attn.")) {
    return {{absl::StrCat(ours, "mixer.", rest)}};
  }
  return MlpTensors(ours, rest, c, stored);
}

}  // namespace

extern const Architecture kGraniteMoeHybrid = {"granitemoehybrid",
                                               "GraniteMoeHybridForCausalLM",
                                               &ReadGraniteMoeHybridConfig,
                                               nullptr,
                                               nullptr,
                                               &GraniteMoeHybridTensors};

}  // namespace attnserve::model::architectures

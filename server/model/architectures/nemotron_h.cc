// NemotronHForCausalLM (model_type "nemotron_h": NVIDIA's Nemotron-H 4B/8B/47B/56B and the
// Nemotron-3 Nano MoE models): transformers' src/transformers/models/nemotron_h/
// modeling_nemotron_h.py at commit 897753a012bfa6dac8c0ae3281f23a2fc1e72db6 and
// configuration_nemotron_h.py at cfeb552ef0cb77b59ff08da07698ecaad5f7b5ba, which know the
// mamba, attention and moe blocks; the dense MLP block ("-", "mlp") of the first Nemotron-H
// checkpoints is their remote code's modeling_nemotron_h.py (NVIDIA's; copy read in
// nvidia-cosmos/cosmos-rl @ 19e8a790: NemotronHMLP, down(relu2(up x))). Every block is
// norm -> one part -> residual, the part chosen by the block's character of
// hybrid_override_pattern (or its word in layers_block_type):
//   M  mamba      the mamba2 mixer: mamba_num_heads heads of mamba_head_dim (d_inner their
//                 product), n_groups groups, the gated norm per group (group_size = d_inner /
//                 n_groups), chunk_size, time_step_limit
//   *  attention  GQA attention without positions or biases (num_key_value_heads, head_dim;
//                 upstream ignores attention_bias)
//   -  mlp        down(relu(up x)²), intermediate_size (mlp_hidden_act relu2)
//   E  moe        sigmoid router (gate.weight, gate.e_score_correction_bias choosing the top
//                 num_experts_per_tok), weights normalised (norm_topk_prob) and times
//                 routed_scaling_factor; n_routed_experts relu² experts of moe_intermediate_size
//                 and a shared one of n_shared_experts · moe_shared_expert_intermediate_size
// In attnserve's layers: M -> "mamba2", * -> "standard" (no MLP: mlp_layers false), - and E ->
// "none" with the MLP (the block's norm is the layer's mlp_norm). RMSNorms with
// layer_norm_epsilon; backbone.embeddings, backbone.norm_f, lm_head tied or not.
//
// Refused by name: other pattern characters or block words, mlp_hidden_act other than relu2,
// mamba_hidden_act other than silu, grouped routing (n_group > 1), moe_latent_size, a pattern with
// both - and E blocks of different widths, use_conv_bias false, use_bias true (the Mamba
// projections' biases).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "kernels/common/status_macros.h"
#include "server/model/architectures/architecture.h"
#include "server/model/architectures/mamba.h"
#include "server/model/architectures/tensor_names.h"

namespace attnserve::model::architectures {
namespace {

// The blocks' kinds: hybrid_override_pattern's characters, or layers_block_type's words.
absl::StatusOr<std::vector<char>> ReadBlocks(const ConfigJson& json) {
  std::vector<char> blocks;
  if (Has(json, "layers_block_type")) {
    ASSIGN_OR_RETURN(const std::vector<std::string> words,
                     StringListKey(json, "layers_block_type"));
    for (const std::string& word : words) {
      if (word == "mamba") {
        blocks.push_back('M');
      } else if (word == "attention") {
        blocks.push_back('*');
      } else if (word == "mlp") {
        blocks.push_back('-');
      } else if (word == "moe") {
        blocks.push_back('E');
      } else {
        return Unsupported("layers_block_type", word, "mamba, attention, mlp and moe are");
      }
    }
  } else {
    ASSIGN_OR_RETURN(const std::string pattern,
                     StringKey(json, "hybrid_override_pattern", "M-M-M-M*-M-M-M-M-M*-"));
    for (char block : pattern) {
      if (block != 'M' && block != '*' && block != '-' && block != 'E') {
        return Unsupported("hybrid_override_pattern", std::string(1, block),
                           "M (Mamba-2), * (attention), - (MLP) and E (experts) are");
      }
      blocks.push_back(block);
    }
  }
  if (blocks.empty()) return Unsupported("hybrid_override_pattern", "\"\"", "no blocks");
  return blocks;
}

// The Mamba-2 blocks' keys (the config's attribute names as saved, else the constructor's).
absl::Status ReadMambaKeys(const ConfigJson& json, v1::ModelConfig* c) {
  auto either = [&](const char* saved, const char* argument,
                    int64_t fallback) -> absl::StatusOr<int64_t> {
    return Has(json, saved) ? IntKey(json, saved, fallback) : IntKey(json, argument, fallback);
  };
  ASSIGN_OR_RETURN(const int64_t heads, IntKey(json, "mamba_num_heads", 128));
  ASSIGN_OR_RETURN(const int64_t head_dim, IntKey(json, "mamba_head_dim", 64));
  ASSIGN_OR_RETURN(const int64_t groups, either("n_groups", "mamba_n_groups", 8));
  ASSIGN_OR_RETURN(const int64_t state, either("ssm_state_size", "ssm_state_size", 128));
  ASSIGN_OR_RETURN(const int64_t conv, either("conv_kernel", "mamba_d_conv", 4));
  ASSIGN_OR_RETURN(const int64_t chunk, either("chunk_size", "mamba_chunk_size", 128));
  ASSIGN_OR_RETURN(const std::string act, StringKey(json, "mamba_hidden_act", "silu"));
  ASSIGN_OR_RETURN(const bool conv_bias, BoolKey(json, "use_conv_bias", true));
  ASSIGN_OR_RETURN(const bool proj_bias, BoolKey(json, "use_bias", false));
  if (act != "silu") return Unsupported("mamba_hidden_act", act, "silu is");
  if (!conv_bias) return Unsupported("use_conv_bias", "false", "conv1d.bias is expected");
  if (proj_bias) return Unsupported("use_bias", "true", "in_proj and out_proj have no bias here");
  if (heads <= 0 || head_dim <= 0) {
    return Unsupported("mamba_num_heads", absl::StrCat(heads, " of ", head_dim),
                       "both must be > 0");
  }
  c->set_ssm_num_heads(heads);
  c->set_ssm_inner_size(heads * head_dim);
  c->set_expand(1);  // unused: ssm_inner_size says d_inner
  c->set_ssm_n_groups(groups);
  c->set_state_size(state);
  c->set_conv_kernel(conv);
  c->set_ssm_chunk_size(chunk);
  return ReadTimeStepLimit(json, c);
}

absl::Status ReadExperts(const ConfigJson& json, int64_t dense_width, bool has_mlp_blocks,
                         v1::ModelConfig* c) {
  ASSIGN_OR_RETURN(const int64_t experts, IntKey(json, "n_routed_experts", 8));
  ASSIGN_OR_RETURN(const int64_t top_k, IntKey(json, "num_experts_per_tok", 2));
  ASSIGN_OR_RETURN(const int64_t width, IntKey(json, "moe_intermediate_size", 7688));
  ASSIGN_OR_RETURN(const int64_t shared_count, IntKey(json, "n_shared_experts", 1));
  ASSIGN_OR_RETURN(const int64_t shared_width,
                   IntKey(json, "moe_shared_expert_intermediate_size", 7688));
  ASSIGN_OR_RETURN(const int64_t groups, IntKey(json, "n_group", 1));
  ASSIGN_OR_RETURN(const bool normalize, BoolKey(json, "norm_topk_prob", true));
  ASSIGN_OR_RETURN(const double scaling, NumberKey(json, "routed_scaling_factor", 1.0));
  if (Has(json, "moe_latent_size")) {
    ASSIGN_OR_RETURN(const int64_t latent, IntKey(json, "moe_latent_size", 0));
    if (latent != 0) {
      return Unsupported("moe_latent_size", absl::StrCat(latent), "only none is");
    }
  }
  if (groups != 1) {
    return Unsupported("n_group", absl::StrCat(groups), "grouped routing is not built: only 1");
  }
  if (has_mlp_blocks && width != dense_width) {
    return Unsupported("moe_intermediate_size", absl::StrCat(width),
                       absl::StrCat("with - blocks it must be intermediate_size = ", dense_width));
  }
  if (!(scaling > 0)) {
    return Unsupported("routed_scaling_factor", absl::StrCat(scaling), "it must be > 0");
  }
  c->set_intermediate_size(width);
  c->set_num_experts(experts);
  c->set_num_experts_per_tok(top_k);
  c->set_moe_router("sigmoid_topk");
  c->set_moe_norm_topk_prob(normalize);
  c->set_moe_routed_scaling_factor(scaling);
  c->set_moe_shared_expert_size(shared_count * shared_width);
  return absl::OkStatus();
}

absl::StatusOr<v1::ModelConfig> ReadNemotronHConfig(const ConfigJson& json) {
  v1::ModelConfig c;
  c.set_model_type("nemotron_h");
  ASSIGN_OR_RETURN(const int64_t vocab, IntKey(json, "vocab_size", 131072));
  ASSIGN_OR_RETURN(const int64_t hidden, IntKey(json, "hidden_size", 4096));
  ASSIGN_OR_RETURN(const int64_t width, IntKey(json, "intermediate_size", 21504));
  ASSIGN_OR_RETURN(const int64_t heads, IntKey(json, "num_attention_heads", 32));
  ASSIGN_OR_RETURN(const int64_t kv_heads, IntKey(json, "num_key_value_heads", heads));
  ASSIGN_OR_RETURN(const int64_t head_dim, IntKey(json, "head_dim", 128));
  ASSIGN_OR_RETURN(const int64_t context, IntKey(json, "max_position_embeddings", 4096));
  ASSIGN_OR_RETURN(const double eps, NumberKey(json, "layer_norm_epsilon", 1e-5));
  ASSIGN_OR_RETURN(const bool tied, BoolKey(json, "tie_word_embeddings", false));
  ASSIGN_OR_RETURN(const bool mlp_bias, BoolKey(json, "mlp_bias", false));
  ASSIGN_OR_RETURN(const std::string act, StringKey(json, "mlp_hidden_act", "relu2"));
  if (act != "relu2") return Unsupported("mlp_hidden_act", act, "relu2 is");
  c.set_vocab_size(vocab);
  c.set_hidden_size(hidden);
  c.set_num_heads(heads);
  c.set_num_key_value_heads(kv_heads);
  c.set_head_dim(head_dim);
  c.set_max_position_embeddings(context);
  c.set_max_sequence_length(context);  // no positions: the trained context
  c.set_norm_epsilon(eps);
  c.set_tie_word_embeddings(tied);
  c.set_hidden_act("relu2");
  c.set_plain_mlp(true);
  c.set_mlp_bias(mlp_bias);

  ASSIGN_OR_RETURN(const std::vector<char> blocks, ReadBlocks(json));
  bool mlp_blocks = false, moe_blocks = false;
  for (char block : blocks) {
    c.add_layers(block == 'M' ? "mamba2" : block == '*' ? "standard" : "none");
    c.add_mlp_layers(block == '-' || block == 'E');
    c.add_expert_layers(block == 'E');
    mlp_blocks |= block == '-';
    moe_blocks |= block == 'E';
  }
  c.set_intermediate_size(width);
  if (moe_blocks) {
    RETURN_IF_ERROR(ReadExperts(json, width, mlp_blocks, &c));
  } else {
    c.clear_expert_layers();
  }
  RETURN_IF_ERROR(ReadMambaKeys(json, &c));
  return c;
}

// backbone.layers.N.norm -> the layer's norm, or its mlp_norm in an MLP block;
// backbone.layers.N.mixer.* -> mixer.* (Mamba-2, attention) or the MLP's: up/down_proj,
// gate.weight -> router.weight, gate.e_score_correction_bias -> router.correction_bias,
// experts.E.* and shared_experts.* -> shared_expert.*. The rest keeps its name.
std::vector<TensorPart> NemotronHTensors(const std::string& stored, const v1::ModelConfig& c) {
  int layer = -1;
  absl::string_view rest;
  if (!SplitLayerName(stored, &layer, &rest, "backbone.layers.") || layer >= c.layers_size()) {
    return {{stored}};
  }
  const std::string ours = absl::StrCat("backbone.layers.", layer, ".");
  const bool mlp_block = c.layers(layer) == "none";
  if (rest == "norm.weight") return {{ours + (mlp_block ? "mlp_norm.weight" : "norm.weight")}};
  if (!absl::ConsumePrefix(&rest, "mixer.")) return {{stored}};
  if (!mlp_block) return {{absl::StrCat(ours, "mixer.", rest)}};
  if (rest == "gate.weight") return {{ours + "mlp.router.weight"}};
  if (rest == "gate.e_score_correction_bias") return {{ours + "mlp.router.correction_bias"}};
  if (absl::ConsumePrefix(&rest, "shared_experts.")) {
    return {{absl::StrCat(ours, "mlp.shared_expert.", rest)}};
  }
  return {{absl::StrCat(ours, "mlp.", rest)}};  // up_proj, down_proj, experts.E.*
}

}  // namespace

extern const Architecture kNemotronH = {
    "nemotron_h", "NemotronHForCausalLM", &ReadNemotronHConfig, nullptr,
    nullptr,      &NemotronHTensors};

}  // namespace attnserve::model::architectures

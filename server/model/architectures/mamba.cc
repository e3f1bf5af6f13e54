// MambaForCausalLM (model_type "mamba", Mamba-1): transformers v4.47.1,
// src/transformers/models/mamba/{configuration,modeling}_mamba.py, commit
// 241c04d36867259cdf11dbb4e9d9a60f9cb65ebc. Every layer the mamba mixer (kernels/mamba/), no MLP,
// RMSNorms; tied embeddings unless tie_word_embeddings is false. Tensor names are Model's own
// (backbone.layers.N.mixer.*); mamba_ssm's folders spell the embedding backbone.embedding.
#include "server/model/architectures/mamba.h"

#include "absl/strings/str_cat.h"
#include "kernels/common/status_macros.h"

namespace attnserve::model::architectures {

absl::StatusOr<v1::ModelConfig> ReadMambaConfig(const ConfigJson& json) {
  v1::ModelConfig c;
  c.set_model_type("mamba");
  ASSIGN_OR_RETURN(const int64_t hidden, IntKey(json, "hidden_size", 768));
  ASSIGN_OR_RETURN(const int64_t layers, LayerCount(json, "num_hidden_layers", 32));
  ASSIGN_OR_RETURN(const int64_t state, IntKey(json, "state_size", 16));
  ASSIGN_OR_RETURN(const int64_t conv, IntKey(json, "conv_kernel", 4));
  ASSIGN_OR_RETURN(const int64_t expand, IntKey(json, "expand", 2));
  ASSIGN_OR_RETURN(const int64_t vocab, IntKey(json, "vocab_size", 50280));
  c.set_hidden_size(hidden);
  c.set_state_size(state);
  c.set_conv_kernel(conv);
  c.set_expand(expand);
  c.set_vocab_size(vocab);
  for (int64_t i = 0; i < layers; ++i) c.add_layers("mamba");
  // time_step_rank may be "auto" (0 here: ceil(hidden_size / 16)) or a number.
  ASSIGN_OR_RETURN(const int64_t rank, IntOrAutoKey(json, "time_step_rank"));
  c.set_time_step_rank(rank);
  ASSIGN_OR_RETURN(const double eps, NumberKey(json, "layer_norm_epsilon", 1e-5));
  c.set_norm_epsilon(eps);
  ASSIGN_OR_RETURN(const bool tie, BoolKey(json, "tie_word_embeddings", true));
  c.set_tie_word_embeddings(tie);
  ASSIGN_OR_RETURN(const bool bias, BoolKey(json, "use_bias", false));
  if (bias) {
    return Unsupported("use_bias", "true",
                       "in_proj and out_proj have no bias in attnserve's Mamba");
  }
  ASSIGN_OR_RETURN(const bool conv_bias, BoolKey(json, "use_conv_bias", true));
  if (!conv_bias) return Unsupported("use_conv_bias", "false", "conv1d.bias is expected");
  return c;
}

absl::Status ReadPrefixedMambaKeys(const ConfigJson& json, v1::ModelConfig* c) {
  ASSIGN_OR_RETURN(const int64_t d_state, IntKey(json, "mamba_d_state", 16));
  ASSIGN_OR_RETURN(const int64_t d_conv, IntKey(json, "mamba_d_conv", 4));
  ASSIGN_OR_RETURN(const int64_t expand, IntKey(json, "mamba_expand", 2));
  ASSIGN_OR_RETURN(const int64_t dt_rank, IntOrAutoKey(json, "mamba_dt_rank"));
  ASSIGN_OR_RETURN(const bool conv_bias, BoolKey(json, "mamba_conv_bias", true));
  ASSIGN_OR_RETURN(const bool proj_bias, BoolKey(json, "mamba_proj_bias", false));
  if (proj_bias) return Unsupported("mamba_proj_bias", "true", "in_proj and out_proj have none");
  if (!conv_bias) return Unsupported("mamba_conv_bias", "false", "conv1d.bias is expected");
  c->set_state_size(d_state);
  c->set_conv_kernel(d_conv);
  c->set_expand(expand);
  c->set_time_step_rank(dt_rank);
  return absl::OkStatus();
}

std::string MambaModelName(const std::string& stored) {
  return stored == "backbone.embedding.weight" ? "backbone.embeddings.weight" : stored;
}

namespace {}  // namespace

extern const Architecture kMamba = {"mamba", "MambaForCausalLM", &ReadMambaConfig, &MambaModelName,
                                    nullptr};

absl::Status ReadTimeStepLimit(const ConfigJson& json, v1::ModelConfig* c) {
  if (!Has(json, "time_step_limit")) return absl::OkStatus();
  ASSIGN_OR_RETURN(const std::vector<double> limit, NumberListKey(json, "time_step_limit"));
  if (limit.size() != 2) {
    return Unsupported("time_step_limit", absl::StrCat(limit.size(), " values"),
                       "it must be [min, max]");
  }
  c->add_time_step_limit(limit[0]);
  c->add_time_step_limit(limit[1]);
  return absl::OkStatus();
}

absl::Status ReadMambaNKeys(const ConfigJson& json, v1::ModelConfig* c, bool falcon_h1) {
  const int64_t hidden = c->hidden_size();
  ASSIGN_OR_RETURN(const int64_t heads, IntKey(json, "mamba_n_heads", 128));
  ASSIGN_OR_RETURN(const int64_t groups, IntKey(json, "mamba_n_groups", 1));
  ASSIGN_OR_RETURN(const int64_t state, IntKey(json, "mamba_d_state", 256));
  ASSIGN_OR_RETURN(const int64_t conv, IntKey(json, "mamba_d_conv", 4));
  ASSIGN_OR_RETURN(const int64_t expand, IntKey(json, "mamba_expand", 2));
  ASSIGN_OR_RETURN(const int64_t chunk, IntKey(json, "mamba_chunk_size", 256));
  ASSIGN_OR_RETURN(const int64_t head_dim, IntOrAutoKey(json, "mamba_d_head"));
  ASSIGN_OR_RETURN(const bool conv_bias, BoolKey(json, "mamba_conv_bias", true));
  ASSIGN_OR_RETURN(const bool proj_bias, BoolKey(json, "mamba_proj_bias", false));
  int64_t width = expand * hidden;
  if (falcon_h1) {  // FalconH1Config's default is 1024; null is expand · hidden
    ASSIGN_OR_RETURN(width, Has(json, "mamba_d_ssm") ? IntOrAutoKey(json, "mamba_d_ssm")
                                                     : absl::StatusOr<int64_t>(1024));
    if (width <= 0) width = expand * hidden;
  }
  if (heads <= 0 || (head_dim > 0 && head_dim * heads != width) ||
      (head_dim <= 0 && width % heads != 0)) {
    return Unsupported(
        "mamba_n_heads", absl::StrCat(heads),
        absl::StrCat("mamba_n_heads · mamba_d_head must be ",
                     falcon_h1 ? "mamba_d_ssm" : "mamba_expand · hidden_size", " = ", width));
  }
  if (width != expand * hidden) c->set_ssm_inner_size(width);
  if (groups != 1 && !falcon_h1) {
    return Unsupported("mamba_n_groups", absl::StrCat(groups),
                       "upstream's gated norm spans all of d_inner, attnserve's a group at a "
                       "time: only 1 (every released Granite-4.0-H and Bamba) is the same");
  }
  if (!conv_bias) return Unsupported("mamba_conv_bias", "false", "conv1d.bias is expected");
  if (proj_bias) return Unsupported("mamba_proj_bias", "true", "in_proj has no bias here");
  c->set_state_size(state);
  c->set_conv_kernel(conv);
  c->set_expand(expand);
  c->set_ssm_num_heads(heads);
  c->set_ssm_n_groups(groups);
  c->set_ssm_chunk_size(chunk);
  // FalconH1Mixer fixes time_step_limit at (0, inf), whatever the config says.
  return falcon_h1 ? absl::OkStatus() : ReadTimeStepLimit(json, c);
}

}  // namespace attnserve::model::architectures

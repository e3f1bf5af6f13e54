// Mamba2ForCausalLM (model_type "mamba2"): transformers' tag v4.48.0,
// src/transformers/models/mamba2/{configuration,modeling}_mamba2.py (v4.47.1's pure-torch
// Mamba-2 disagreed with its own cached steps; #35154 fixed it in v4.48.0), and, for several
// groups, the file at commit 020a37d2264e60dc7beb9634c3e87ad870073e2c (B and C
// repeated to the heads with repeat_interleave, #37533). Every layer the mamba2 mixer
// (kernels/mamba2/), no MLP, RMSNorms, the Mamba tensor names (backbone.layers.N.mixer.*,
// backbone.embeddings, backbone.norm_f, lm_head; mamba_ssm's backbone.embedding too). The gated
// norm is per group (mamba_ssm's); transformers up to v4.51 spans all of d_inner, which equals it
// for one group only (docs/models.md).
#include "absl/strings/str_cat.h"
#include "kernels/common/status_macros.h"
#include "server/model/architectures/mamba.h"

namespace attnserve::model::architectures {
namespace {

absl::StatusOr<v1::ModelConfig> ReadMamba2Config(const ConfigJson& json) {
  v1::ModelConfig c;
  c.set_model_type("mamba2");
  ASSIGN_OR_RETURN(const int64_t hidden, IntKey(json, "hidden_size", 4096));
  ASSIGN_OR_RETURN(const int64_t layers, LayerCount(json, "num_hidden_layers", 64));
  ASSIGN_OR_RETURN(const int64_t state, IntKey(json, "state_size", 128));
  ASSIGN_OR_RETURN(const int64_t conv, IntKey(json, "conv_kernel", 4));
  ASSIGN_OR_RETURN(const int64_t expand, IntKey(json, "expand", 2));
  ASSIGN_OR_RETURN(const int64_t heads, IntKey(json, "num_heads", 128));
  ASSIGN_OR_RETURN(const int64_t head_dim, IntKey(json, "head_dim", 64));
  ASSIGN_OR_RETURN(const int64_t groups, IntKey(json, "n_groups", 8));
  ASSIGN_OR_RETURN(const int64_t chunk, IntKey(json, "chunk_size", 256));
  ASSIGN_OR_RETURN(const int64_t vocab, IntKey(json, "vocab_size", 32768));
  if (heads * head_dim != expand * hidden) {
    return Unsupported("num_heads", std::to_string(heads),
                       absl::StrCat("num_heads · head_dim (", heads, " · ", head_dim,
                                    ") must equal expand · hidden_size (", expand * hidden, ")"));
  }
  c.set_hidden_size(hidden);
  c.set_state_size(state);
  c.set_conv_kernel(conv);
  c.set_expand(expand);
  c.set_ssm_num_heads(heads);
  c.set_ssm_n_groups(groups);
  c.set_ssm_chunk_size(chunk);
  c.set_vocab_size(vocab);
  for (int64_t i = 0; i < layers; ++i) c.add_layers("mamba2");
  RETURN_IF_ERROR(ReadTimeStepLimit(json, &c));
  ASSIGN_OR_RETURN(const double eps, NumberKey(json, "layer_norm_epsilon", 1e-5));
  c.set_norm_epsilon(eps);
  ASSIGN_OR_RETURN(const bool tie, BoolKey(json, "tie_word_embeddings", false));
  c.set_tie_word_embeddings(tie);
  ASSIGN_OR_RETURN(const std::string act, StringKey(json, "hidden_act", "silu"));
  if (act != "silu") return Unsupported("hidden_act", act, "Mamba-2's conv is followed by silu");
  ASSIGN_OR_RETURN(const bool bias, BoolKey(json, "use_bias", false));
  if (bias) {
    return Unsupported("use_bias", "true",
                       "in_proj and out_proj have no bias in attnserve's Mamba-2");
  }
  ASSIGN_OR_RETURN(const bool conv_bias, BoolKey(json, "use_conv_bias", true));
  if (!conv_bias) return Unsupported("use_conv_bias", "false", "conv1d.bias is expected");
  return c;
}

}  // namespace

extern const Architecture kMamba2 = {"mamba2", "Mamba2ForCausalLM", &ReadMamba2Config,
                                     &MambaModelName, nullptr};

}  // namespace attnserve::model::architectures

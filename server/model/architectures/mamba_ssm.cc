// mamba_ssm's own folders (state-spaces/mamba-*, state-spaces/mamba2-*: a config.json with
// d_model, n_layer, ssm_cfg and no model_type, and pytorch_model.bin; torch_pickle.h reads the
// weights): mamba_ssm v2.2.2, mamba_ssm/models/config_mamba.py and mixer_seq_simple.py
// (MambaConfig, create_block, MambaLMHeadModel), mamba_ssm/modules/mamba_simple.py (Mamba) and
// mamba2.py (Mamba2) for the defaults of ssm_cfg. ssm_cfg.layer "Mamba1" (the default) gives
// mamba layers, "Mamba2" mamba2 layers; RMSNorms (rms_norm true) with epsilon 1e-5; the
// embedding padded to a multiple of pad_vocab_size_multiple rows, as MambaLMHeadModel pads it.
// Not taken (refused by name): d_intermediate > 0 (an MLP after each mixer), attn_layer_idx
// (attention layers), ssm_cfg keys whose values attnserve does not compute with.
// ParseModelConfigJson chooses this reader for a config.json with no model_type and d_model.
#include "absl/strings/str_cat.h"
#include "kernels/common/status_macros.h"
#include "server/model/architectures/mamba.h"

namespace attnserve::model::architectures {
namespace {

absl::StatusOr<v1::ModelConfig> ReadMambaSsmConfig(const ConfigJson& json) {
  v1::ModelConfig c;
  c.set_model_type("mamba_ssm");
  ASSIGN_OR_RETURN(const int64_t hidden, IntKey(json, "d_model", 2560));
  ASSIGN_OR_RETURN(const int64_t layers, LayerCount(json, "n_layer", 64));
  ASSIGN_OR_RETURN(int64_t vocab, IntKey(json, "vocab_size", 50277));
  ASSIGN_OR_RETURN(const int64_t pad, IntKey(json, "pad_vocab_size_multiple", 8));
  if (pad > 0 && vocab % pad != 0) vocab += pad - vocab % pad;
  ASSIGN_OR_RETURN(const int64_t d_intermediate, IntKey(json, "d_intermediate", 0));
  if (d_intermediate != 0) {
    return Unsupported("d_intermediate", std::to_string(d_intermediate),
                       "mamba_ssm's MLP after each mixer is not taken; only 0 is");
  }
  if (Has(json, "attn_layer_idx")) {
    ASSIGN_OR_RETURN(const std::vector<double> attention, NumberListKey(json, "attn_layer_idx"));
    if (!attention.empty()) {
      return Unsupported("attn_layer_idx", absl::StrCat(attention.size(), " layers"),
                         "mamba_ssm's attention layers are not taken; only [] is");
    }
  }
  ASSIGN_OR_RETURN(const bool rms, BoolKey(json, "rms_norm", true));
  if (!rms) return Unsupported("rms_norm", "false", "only RMSNorms are taken");
  ASSIGN_OR_RETURN(const bool tie, BoolKey(json, "tie_embeddings", true));
  ASSIGN_OR_RETURN(const ConfigJson ssm, ObjectKey(json, "ssm_cfg"));
  ASSIGN_OR_RETURN(const std::string layer, StringKey(ssm, "layer", "Mamba1"));
  const bool mamba2 = layer == "Mamba2";
  if (!mamba2 && layer != "Mamba1") {
    return Unsupported("ssm_cfg.layer", layer, "Mamba1 or Mamba2 is expected");
  }
  ASSIGN_OR_RETURN(const int64_t state, IntKey(ssm, "d_state", mamba2 ? 128 : 16));
  ASSIGN_OR_RETURN(const int64_t conv, IntKey(ssm, "d_conv", 4));
  ASSIGN_OR_RETURN(const int64_t expand, IntKey(ssm, "expand", 2));
  ASSIGN_OR_RETURN(const bool bias, BoolKey(ssm, "bias", false));
  if (bias) return Unsupported("ssm_cfg.bias", "true", "in_proj and out_proj have no bias");
  ASSIGN_OR_RETURN(const bool conv_bias, BoolKey(ssm, "conv_bias", true));
  if (!conv_bias) return Unsupported("ssm_cfg.conv_bias", "false", "conv1d.bias is expected");
  c.set_hidden_size(hidden);
  c.set_vocab_size(vocab);
  c.set_state_size(state);
  c.set_conv_kernel(conv);
  c.set_expand(expand);
  c.set_norm_epsilon(1e-5);
  c.set_tie_word_embeddings(tie);
  for (int64_t i = 0; i < layers; ++i) c.add_layers(mamba2 ? "mamba2" : "mamba");
  if (!mamba2) {
    ASSIGN_OR_RETURN(const int64_t rank, IntOrAutoKey(ssm, "dt_rank"));
    c.set_time_step_rank(rank);
    return c;
  }
  ASSIGN_OR_RETURN(const int64_t head_dim, IntKey(ssm, "headdim", 64));
  ASSIGN_OR_RETURN(const int64_t groups, IntKey(ssm, "ngroups", 1));
  ASSIGN_OR_RETURN(const int64_t chunk, IntKey(ssm, "chunk_size", 256));
  ASSIGN_OR_RETURN(const bool gated_norm, BoolKey(ssm, "rmsnorm", true));
  if (!gated_norm) return Unsupported("ssm_cfg.rmsnorm", "false", "the gated RMSNorm is expected");
  ASSIGN_OR_RETURN(const bool before_gate, BoolKey(ssm, "norm_before_gate", false));
  if (before_gate) {
    return Unsupported("ssm_cfg.norm_before_gate", "true", "the norm follows the gate");
  }
  ASSIGN_OR_RETURN(const bool d_has_hdim, BoolKey(ssm, "D_has_hdim", false));
  if (d_has_hdim) return Unsupported("ssm_cfg.D_has_hdim", "true", "D is one scalar a head");
  if (Has(ssm, "d_ssm")) {
    return Unsupported("ssm_cfg.d_ssm", "set", "the scan spans all of expand · d_model");
  }
  if (head_dim <= 0 || (expand * hidden) % head_dim != 0) {
    return Unsupported("ssm_cfg.headdim", std::to_string(head_dim),
                       "it must divide expand · d_model");
  }
  c.set_ssm_num_heads(expand * hidden / head_dim);
  c.set_ssm_n_groups(groups);
  c.set_ssm_chunk_size(chunk);
  if (Has(ssm, "dt_limit")) {
    ASSIGN_OR_RETURN(const std::vector<double> limit, NumberListKey(ssm, "dt_limit"));
    if (limit.size() != 2) {
      return Unsupported("ssm_cfg.dt_limit", absl::StrCat(limit.size(), " values"),
                         "it must be [min, max]");
    }
    c.add_time_step_limit(limit[0]);
    c.add_time_step_limit(limit[1]);
  }
  return c;
}

}  // namespace

extern const Architecture kMambaSsm = {"mamba_ssm", "MambaLMHeadModel", &ReadMambaSsmConfig,
                                       &MambaModelName, nullptr};

}  // namespace attnserve::model::architectures

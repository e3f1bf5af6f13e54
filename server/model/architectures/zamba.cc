// ZambaForCausalLM (model_type "zamba", Zamba-7B-v1): transformers v4.47.1,
// src/transformers/models/zamba/{configuration,modeling}_zamba.py, commit
// 241c04d36867259cdf11dbb4e9d9a60f9cb65ebc. Every layer is a multi-head Mamba-1
// (ZambaMambaMixer: n_mamba_heads heads, each with its own x_proj, dt_proj, A and D; in_proj's
// rows interleaved x/gate; kernels/mamba/mamba_mixer.h with mamba_heads); the "hybrid" layers of
// layers_block_type ([mamba, mamba, hybrid] then hybrid where (i - 3) % attn_layer_period ==
// attn_layer_offset) first run the one shared attention + MLP block (ZambaAttentionDecoderLayer:
// RMSNorm of concat(hidden, input embeddings), GQA attention over 2·hidden without positions
// scaled by (head_dim / 2)^-1/2 writing hidden, RMSNorm, a gated MLP of hidden_act, no residual)
// and add their own `linear` of its output to the Mamba layer's input (server/model/
// shared_block.h). RMSNorms, final_layernorm, lm_head tied by default.
//
// Refused by name: attention_hidden_size other than 2·hidden_size, hidden_mamba_act other than
// silu, mamba_proj_bias, mamba_conv_bias false, and a layers_block_type entry other than mamba
// or hybrid.
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "kernels/common/status_macros.h"
#include "kernels/moe/gated_mlp.h"
#include "server/model/architectures/architecture.h"
#include "server/model/architectures/mamba.h"
#include "server/model/architectures/tensor_names.h"
#include "server/model/architectures/zamba_family.h"

namespace attnserve::model::architectures {
namespace {

absl::StatusOr<v1::ModelConfig> ReadZambaConfig(const ConfigJson& json) {
  v1::ModelConfig c;
  c.set_model_type("zamba");
  ASSIGN_OR_RETURN(const int64_t vocab, IntKey(json, "vocab_size", 32000));
  ASSIGN_OR_RETURN(const int64_t hidden, IntKey(json, "hidden_size", 3712));
  ASSIGN_OR_RETURN(const int64_t attention_hidden,
                   IntKey(json, "attention_hidden_size", 2 * hidden));
  ASSIGN_OR_RETURN(const int64_t mlp, IntKey(json, "intermediate_size", 14848));
  ASSIGN_OR_RETURN(const int64_t layers, LayerCount(json, "num_hidden_layers", 76));
  ASSIGN_OR_RETURN(const int64_t heads, IntKey(json, "num_attention_heads", 16));
  if (heads <= 0) return Unsupported("num_attention_heads", absl::StrCat(heads), "it must be > 0");
  ASSIGN_OR_RETURN(const int64_t head_dim, IntKey(json, "attention_head_dim", 2 * hidden / heads));
  ASSIGN_OR_RETURN(const int64_t kv_heads, IntKey(json, "num_key_value_heads", 16));
  ASSIGN_OR_RETURN(const int64_t mamba_heads, IntKey(json, "n_mamba_heads", 2));
  ASSIGN_OR_RETURN(const std::string act, StringKey(json, "hidden_act", "gelu"));
  ASSIGN_OR_RETURN(const std::string mamba_act, StringKey(json, "hidden_mamba_act", "silu"));
  ASSIGN_OR_RETURN(const double eps, NumberKey(json, "rms_norm_eps", 1e-5));
  ASSIGN_OR_RETURN(const int64_t max_positions, IntKey(json, "max_position_embeddings", 4096));
  ASSIGN_OR_RETURN(const bool tie, BoolKey(json, "tie_word_embeddings", true));
  ASSIGN_OR_RETURN(const int64_t period, IntKey(json, "attn_layer_period", 6));
  ASSIGN_OR_RETURN(const int64_t offset, IntKey(json, "attn_layer_offset", 4));
  ASSIGN_OR_RETURN(std::vector<std::string> types, StringListKey(json, "layers_block_type"));
  if (attention_hidden != 2 * hidden) {
    return Unsupported(
        "attention_hidden_size", absl::StrCat(attention_hidden),
        absl::StrCat("the shared block reads concat(hidden, embeddings): ", 2 * hidden, " is"));
  }
  bool known_act = false;
  kernels::ParseMlpActivation(act, &known_act);
  if (!known_act) return Unsupported("hidden_act", act, "gelu, gelu_pytorch_tanh and silu are");
  if (mamba_act != "silu") return Unsupported("hidden_mamba_act", mamba_act, "silu is");
  if (period < 1) return Unsupported("attn_layer_period", absl::StrCat(period), "it must be >= 1");
  if (types.empty()) {  // ZambaConfig._layers_block_type
    for (int64_t i = 0; i < layers; ++i) {
      const bool hybrid = i == 2 || (i >= 3 && (i - 3) % period == offset);
      types.push_back(hybrid ? "hybrid" : "mamba");
    }
  }
  if (static_cast<int64_t>(types.size()) != layers) {
    return Unsupported("layers_block_type", absl::StrCat(types.size(), " entries"),
                       absl::StrCat("one per layer: ", layers));
  }

  RETURN_IF_ERROR(ReadPrefixedMambaKeys(json, &c));
  SetZambaCommonKeys({vocab, hidden, mlp, heads, kv_heads, head_dim, act, eps, max_positions, tie},
                     &c);
  c.set_mamba_num_heads(mamba_heads);
  RETURN_IF_ERROR(SetZambaLayers(types, "mamba", &c));
  return c;
}

// model.embed_tokens -> backbone.embeddings, model.final_layernorm -> backbone.norm_f;
// model.layers.N.{input_layernorm, mamba_decoder.input_layernorm} -> backbone.layers.N.norm,
// {mamba., mamba_decoder.mamba.} -> mixer., linear -> shared_linear;
// model.layers.N.shared_transf.{input_layernorm -> norm, self_attn -> mixer, pre_ff_layernorm ->
// mlp_norm, feed_forward -> mlp} -> backbone.shared.0.*, whichever N holds the tied block.
std::string ZambaModelName(const std::string& stored) {
  const std::string shared = ".shared_transf.";
  if (const size_t at = stored.find(shared);
      absl::StartsWith(stored, "model.layers.") && at != std::string::npos) {
    return absl::StrCat(
        "backbone.shared.0.",
        absl::StrReplaceAll(stored.substr(at + shared.size()), {{"input_layernorm.", "norm."},
                                                                {"self_attn.", "mixer."},
                                                                {"pre_ff_layernorm.", "mlp_norm."},
                                                                {"feed_forward.", "mlp."}}));
  }
  // A hybrid layer's Mamba layer (mamba_decoder.) is the layer's own.
  return RenameLayerTensor(
      absl::StrReplaceAll(stored, {{".mamba_decoder.", "."}}),
      {{"model.embed_tokens.weight", "backbone.embeddings.weight"},
       {"model.final_layernorm.weight", "backbone.norm_f.weight"}},
      {{".input_layernorm.", ".norm."}, {".mamba.", ".mixer."}, {".linear.", ".shared_linear."}});
}

}  // namespace

extern const Architecture kZamba = {"zamba", "ZambaForCausalLM", &ReadZambaConfig, &ZambaModelName,
                                    nullptr};

}  // namespace attnserve::model::architectures

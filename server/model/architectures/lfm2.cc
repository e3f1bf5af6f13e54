// Lfm2ForCausalLM (model_type "lfm2": Liquid AI's LFM2, 350M to 2.6B): transformers'
// src/transformers/models/lfm2/modeling_lfm2.py at commit 1d6b6ca61a8b640b6a5874c1eb4c154fd112a000
// and configuration_lfm2.py at 4f7e1d467f2615fe8de4a089a8b90cf861bea4d7. Layer i is
// layer_types[i] (or, without it, "full_attention" at full_attn_idxs and "conv" elsewhere; with
// neither, every layer attention):
//   conv            Lfm2ShortConv: the short_conv mixer (kernels/short_conv/), conv_L_cache wide,
//                   biases with conv_bias
//   full_attention  Lfm2Attention: GQA with q_layernorm and k_layernorm (RMSNorm over each head,
//                   before the rotary positions, rope_theta), no biases
// each followed by Lfm2MLP, a SwiGLU (w1 gate, w3 up, w2 down) whose width is intermediate_size
// (block_ff_dim where given) adjusted as Lfm2MLP does with block_auto_adjust_ff_dim: int(2/3 ·
// width), then with block_ffn_dim_multiplier (null: none) int(multiplier · width) rounded up to
// a multiple of block_multiple_of. RMSNorms (weight · x / rms, norm_eps): operator_norm before the
// mixer, ffn_norm before the MLP, and embedding_norm, which despite its name is the final norm
// (Lfm2Model applies it after the layers). lm_head tied unless tie_embedding /
// tie_word_embeddings says otherwise.
//
// Refused by name: a layer type other than conv or full_attention, rope_scaling.
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "kernels/common/status_macros.h"
#include "server/model/architectures/architecture.h"
#include "server/model/architectures/tensor_names.h"

namespace attnserve::model::architectures {
namespace {

// Lfm2MLP's width.
absl::StatusOr<int64_t> FeedForwardWidth(const ConfigJson& json) {
  ASSIGN_OR_RETURN(int64_t width, IntKey(json, "intermediate_size", 12288));
  if (Has(json, "block_ff_dim")) {
    ASSIGN_OR_RETURN(width, IntKey(json, "block_ff_dim", width));
  }
  ASSIGN_OR_RETURN(const bool adjust, BoolKey(json, "block_auto_adjust_ff_dim", true));
  if (!adjust) return width;
  width = static_cast<int64_t>(2.0 * static_cast<double>(width) / 3.0);
  // block_ffn_dim_multiplier: absent -> 1.0 (Lfm2Config's default); null -> no multiplier.
  const auto key = json.fields().find("block_ffn_dim_multiplier");
  const bool null_multiplier =
      key != json.fields().end() && key->second.kind_case() == google::protobuf::Value::kNullValue;
  ASSIGN_OR_RETURN(const double multiplier, NumberKey(json, "block_ffn_dim_multiplier", 1.0));
  if (!null_multiplier) {
    ASSIGN_OR_RETURN(const int64_t multiple, IntKey(json, "block_multiple_of", 256));
    if (multiple <= 0) {
      return Unsupported("block_multiple_of", absl::StrCat(multiple), "it must be > 0");
    }
    width = static_cast<int64_t>(multiplier * static_cast<double>(width));
    width = multiple * ((width + multiple - 1) / multiple);
  }
  return width;
}

absl::StatusOr<v1::ModelConfig> ReadLfm2Config(const ConfigJson& json) {
  v1::ModelConfig c;
  c.set_model_type("lfm2");
  ASSIGN_OR_RETURN(const int64_t vocab, IntKey(json, "vocab_size", 65536));
  ASSIGN_OR_RETURN(const int64_t hidden, IntKey(json, "hidden_size", 2560));
  ASSIGN_OR_RETURN(const int64_t layers, LayerCount(json, "num_hidden_layers", 32));
  ASSIGN_OR_RETURN(const int64_t heads, IntKey(json, "num_attention_heads", 32));
  ASSIGN_OR_RETURN(const int64_t kv_heads, IntKey(json, "num_key_value_heads", 8));
  ASSIGN_OR_RETURN(const int64_t context, IntKey(json, "max_position_embeddings", 128000));
  ASSIGN_OR_RETURN(const double eps, NumberKey(json, "norm_eps", 1e-5));
  ASSIGN_OR_RETURN(double theta, NumberKey(json, "rope_theta", 1e6));
  if (Has(json, "theta")) {
    ASSIGN_OR_RETURN(theta, NumberKey(json, "theta", theta));
  }
  ASSIGN_OR_RETURN(bool tied, BoolKey(json, "tie_word_embeddings", true));
  if (Has(json, "tie_embedding")) {
    ASSIGN_OR_RETURN(tied, BoolKey(json, "tie_embedding", tied));
  }
  ASSIGN_OR_RETURN(const int64_t width, IntKey(json, "conv_L_cache", 3));
  ASSIGN_OR_RETURN(const bool conv_bias, BoolKey(json, "conv_bias", false));
  ASSIGN_OR_RETURN(const int64_t ff, FeedForwardWidth(json));
  bool scaled = false;
  ASSIGN_OR_RETURN(const ConfigJson scaling, ObjectKey(json, "rope_scaling", &scaled));
  if (scaled && !scaling.fields().empty()) {
    return Unsupported("rope_scaling", "an object", "LFM2's rotary positions are unscaled");
  }
  c.set_vocab_size(vocab);
  c.set_hidden_size(hidden);
  c.set_num_heads(heads);
  c.set_num_key_value_heads(kv_heads);
  c.set_max_position_embeddings(context);
  c.set_max_sequence_length(context);
  c.set_norm_epsilon(eps);
  c.set_rope_theta(theta);
  c.set_tie_word_embeddings(tied);
  c.set_conv_kernel(width);
  c.set_short_conv_bias(conv_bias);
  c.set_intermediate_size(ff);
  c.set_attention_qk_norm(true);

  ASSIGN_OR_RETURN(std::vector<std::string> types, StringListKey(json, "layer_types"));
  if (types.empty()) {
    ASSIGN_OR_RETURN(const std::vector<double> attention, NumberListKey(json, "full_attn_idxs"));
    const bool listed = Has(json, "full_attn_idxs") && !attention.empty();
    types.assign(layers, listed ? "conv" : "full_attention");
    for (double index : attention) {
      if (index < 0 || index >= layers || index != std::floor(index)) {
        return Unsupported("full_attn_idxs", absl::StrCat(index),
                           absl::StrCat("each must be a layer index below ", layers));
      }
      types[static_cast<size_t>(index)] = "full_attention";
    }
  }
  if (static_cast<int64_t>(types.size()) != layers) {
    return Unsupported("layer_types", absl::StrCat(types.size(), " entries"),
                       absl::StrCat("one per layer: ", layers));
  }
  for (const std::string& type : types) {
    if (type != "conv" && type != "full_attention") {
      return Unsupported("layer_types", type, "conv and full_attention are");
    }
    c.add_layers(type == "conv" ? "short_conv" : "standard");
  }
  return c;
}

// model.embed_tokens -> backbone.embeddings, model.embedding_norm (the final norm) ->
// backbone.norm_f; model.layers.N.{operator_norm -> norm, ffn_norm -> mlp_norm, conv.{in_proj,
// conv, out_proj} -> mixer.*, self_attn.{q,k,v}_proj -> mixer.*, self_attn.out_proj ->
// mixer.o_proj, self_attn.{q,k}_layernorm -> mixer.{q,k}_norm, feed_forward.{w1, w3, w2} ->
// mlp.{gate, up, down}_proj}; lm_head as it is.
std::string Lfm2ModelName(const std::string& stored) {
  if (stored == "model.embed_tokens.weight") return "backbone.embeddings.weight";
  if (stored == "model.embedding_norm.weight") return "backbone.norm_f.weight";
  int layer = -1;
  absl::string_view rest;
  if (!SplitLayerName(stored, &layer, &rest)) return stored;
  const std::string ours = absl::StrCat("backbone.layers.", layer, ".");
  if (rest == "operator_norm.weight") return ours + "norm.weight";
  if (rest == "ffn_norm.weight") return ours + "mlp_norm.weight";
  if (absl::ConsumePrefix(&rest, "conv.")) return absl::StrCat(ours, "mixer.", rest);
  if (absl::ConsumePrefix(&rest, "self_attn.")) {
    for (const auto& [theirs, mine] : {std::pair<const char*, const char*>{"out_proj.", "o_proj."},
                                       {"q_layernorm.", "q_norm."},
                                       {"k_layernorm.", "k_norm."}}) {
      if (absl::ConsumePrefix(&rest, theirs)) return absl::StrCat(ours, "mixer.", mine, rest);
    }
    return absl::StrCat(ours, "mixer.", rest);
  }
  if (absl::ConsumePrefix(&rest, "feed_forward.")) {
    for (const auto& [theirs, mine] : {std::pair<const char*, const char*>{"w1.", "gate_proj."},
                                       {"w3.", "up_proj."},
                                       {"w2.", "down_proj."}}) {
      if (absl::ConsumePrefix(&rest, theirs)) return absl::StrCat(ours, "mlp.", mine, rest);
    }
  }
  return stored;  // unexpected: the loader says so
}

}  // namespace

extern const Architecture kLfm2 = {"lfm2", "Lfm2ForCausalLM", &ReadLfm2Config, &Lfm2ModelName,
                                   nullptr};

}  // namespace attnserve::model::architectures

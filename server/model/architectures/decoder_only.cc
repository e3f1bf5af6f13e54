#include "server/model/architectures/decoder_only.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kernels/common/status_macros.h"

namespace attnserve::model::architectures {
namespace {

absl::Status ReadRopeScaling(const ConfigJson& json, v1::ModelConfig* c) {
  bool present = false;
  ASSIGN_OR_RETURN(const ConfigJson scaling, ObjectKey(json, "rope_scaling", &present));
  if (!present) return absl::OkStatus();
  v1::RopeScaling* s = c->mutable_rope_scaling();
  // "type" is rope_type's old name (transformers reads both).
  ASSIGN_OR_RETURN(std::string type, StringKey(scaling, "type", "default"));
  ASSIGN_OR_RETURN(type, StringKey(scaling, "rope_type", type));
  if (type == "su") type = "longrope";  // transformers' older names of the same scaling
  if (type == "ntk") type = "dynamic";
  s->set_rope_type(type);
  ASSIGN_OR_RETURN(const double factor, NumberKey(scaling, "factor", 1.0));
  s->set_factor(factor);
  ASSIGN_OR_RETURN(const int64_t original, IntKey(scaling, "original_max_position_embeddings", 0));
  s->set_original_max_position_embeddings(original);
  ASSIGN_OR_RETURN(const double low, NumberKey(scaling, "low_freq_factor", 0));
  ASSIGN_OR_RETURN(const double high, NumberKey(scaling, "high_freq_factor", 0));
  ASSIGN_OR_RETURN(const double beta_fast, NumberKey(scaling, "beta_fast", 0));
  ASSIGN_OR_RETURN(const double beta_slow, NumberKey(scaling, "beta_slow", 0));
  ASSIGN_OR_RETURN(const double attention_factor, NumberKey(scaling, "attention_factor", 0));
  s->set_low_freq_factor(low);
  s->set_high_freq_factor(high);
  s->set_beta_fast(beta_fast);
  s->set_beta_slow(beta_slow);
  s->set_attention_factor(attention_factor);
  ASSIGN_OR_RETURN(const std::vector<double> short_factor, NumberListKey(scaling, "short_factor"));
  ASSIGN_OR_RETURN(const std::vector<double> long_factor, NumberListKey(scaling, "long_factor"));
  s->mutable_short_factor()->Assign(short_factor.begin(), short_factor.end());
  s->mutable_long_factor()->Assign(long_factor.begin(), long_factor.end());
  if (type == "llama3" && original <= 0) {
    return Unsupported("rope_scaling", "llama3 without original_max_position_embeddings",
                       "transformers requires it");
  }
  return absl::OkStatus();
}

// What the scaling says of lengths past max_position_embeddings: "linear", "dynamic" and "yarn"
// scale a trained max_position_embeddings by `factor` (their configs keep the trained length
// there); "longrope" does too unless the config names its original_max_position_embeddings
// (then max_position_embeddings is the extended length already), as does "llama3" (whose
// max_position_embeddings is the extended one, 131072 in Llama 3.1); no scaling: the trained
// length.
int64_t LongestSequence(const v1::ModelConfig& c) {
  const std::string& type = c.rope_scaling().rope_type();
  const double factor = std::max(1.0, c.rope_scaling().factor());
  const bool scales = type == "linear" || type == "dynamic" || type == "yarn" ||
                      (type == "longrope" && c.original_max_position_embeddings() == 0);
  return scales ? static_cast<int64_t>(c.max_position_embeddings() * factor)
                : c.max_position_embeddings();
}

}  // namespace

absl::StatusOr<v1::ModelConfig> ReadDecoderOnlyConfig(const ConfigJson& json,
                                                      const DecoderDefaults& d) {
  v1::ModelConfig c;
  ASSIGN_OR_RETURN(const int64_t vocab, IntKey(json, "vocab_size", d.vocab_size));
  ASSIGN_OR_RETURN(const int64_t hidden, IntKey(json, "hidden_size", d.hidden_size));
  ASSIGN_OR_RETURN(const int64_t mlp, IntKey(json, "intermediate_size", d.intermediate_size));
  ASSIGN_OR_RETURN(const int64_t layers,
                   LayerCount(json, "num_hidden_layers", d.num_hidden_layers));
  ASSIGN_OR_RETURN(const int64_t heads, IntKey(json, "num_attention_heads", d.num_attention_heads));
  ASSIGN_OR_RETURN(const int64_t kv_heads,
                   IntKey(json, "num_key_value_heads",
                          d.num_key_value_heads > 0 ? d.num_key_value_heads : heads));
  if (heads <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: 'num_attention_heads' must be > 0, got ", heads));
  }
  ASSIGN_OR_RETURN(const int64_t head_dim, IntKey(json, "head_dim", hidden / heads));
  ASSIGN_OR_RETURN(const std::string act, StringKey(json, "hidden_act", "silu"));
  if (act != "silu" && act != "gelu_pytorch_tanh") {
    return Unsupported("hidden_act", act, "silu and gelu_pytorch_tanh are");
  }
  ASSIGN_OR_RETURN(const double eps, NumberKey(json, "rms_norm_eps", d.rms_norm_eps));
  ASSIGN_OR_RETURN(const double theta, NumberKey(json, "rope_theta", d.rope_theta));
  ASSIGN_OR_RETURN(const double partial, NumberKey(json, "partial_rotary_factor", 1.0));
  ASSIGN_OR_RETURN(const int64_t max_positions,
                   IntKey(json, "max_position_embeddings", d.max_position_embeddings));
  ASSIGN_OR_RETURN(const int64_t original, IntKey(json, "original_max_position_embeddings", 0));
  ASSIGN_OR_RETURN(const bool attention_bias, BoolKey(json, "attention_bias", false));
  ASSIGN_OR_RETURN(const bool mlp_bias, BoolKey(json, "mlp_bias", false));
  ASSIGN_OR_RETURN(const bool tie, BoolKey(json, "tie_word_embeddings", d.tie_word_embeddings));

  c.set_vocab_size(vocab);
  c.set_hidden_size(hidden);
  c.set_intermediate_size(mlp);
  for (int64_t i = 0; i < layers; ++i) c.add_layers("standard");
  c.set_num_heads(heads);
  c.set_num_key_value_heads(kv_heads);
  c.set_head_dim(head_dim);
  c.set_hidden_act(act);
  c.set_norm_epsilon(eps);
  c.set_rope_theta(theta);
  c.set_partial_rotary_factor(partial);
  c.set_max_position_embeddings(max_positions);
  c.set_original_max_position_embeddings(original);
  c.set_attention_qkv_bias(attention_bias);
  c.set_attention_out_bias(attention_bias);
  c.set_mlp_bias(mlp_bias);
  c.set_tie_word_embeddings(tie);
  RETURN_IF_ERROR(ReadRopeScaling(json, &c));
  c.set_max_sequence_length(LongestSequence(c));
  return c;
}

std::string DecoderOnlyModelName(const std::string& stored) {
  static const std::pair<const char*, const char*> kWhole[] = {
      {"model.embed_tokens.weight", "backbone.embeddings.weight"},
      {"model.norm.weight", "backbone.norm_f.weight"},
  };
  for (const auto& [hf, ours] : kWhole) {
    if (stored == hf) return ours;
  }
  constexpr absl::string_view kLayers = "model.layers.";
  if (!absl::StartsWith(stored, kLayers)) return stored;
  const size_t dot = stored.find('.', kLayers.size());
  if (dot == std::string::npos || dot == kLayers.size()) return stored;
  const std::string layer = stored.substr(kLayers.size(), dot - kLayers.size());
  const std::string rest = stored.substr(dot + 1);
  const std::string prefix = absl::StrCat("backbone.layers.", layer, ".");
  if (absl::EndsWith(rest, "rotary_emb.inv_freq")) return "";
  static const std::pair<const char*, const char*> kParts[] = {
      {"input_layernorm.", "norm."},
      {"post_attention_layernorm.", "mlp_norm."},
      {"self_attn.", "mixer."},
      {"mlp.", "mlp."},
  };
  for (const auto& [hf, ours] : kParts) {
    if (absl::StartsWith(rest, hf)) {
      return absl::StrCat(prefix, ours, rest.substr(std::string(hf).size()));
    }
  }
  return stored;
}

}  // namespace attnserve::model::architectures

// JambaForCausalLM (model_type "jamba"): transformers v4.47.1,
// src/transformers/models/jamba/{configuration,modeling}_jamba.py, commit
// 241c04d36867259cdf11dbb4e9d9a60f9cb65ebc. Layer i is GQA attention without positions (scale
// head_dim^-1/2) where i % attn_layer_period == attn_layer_offset, else Mamba-1 whose dt, B and C
// go through weighted RMSNorms after x_proj (dt_layernorm, b_layernorm, c_layernorm, epsilon
// rms_norm_eps). Each layer's MLP is a mixture of num_experts SwiGLU experts (router: softmax over
// all experts, the top num_experts_per_tok as they are, JambaSparseMoeBlock) where i %
// expert_layer_period == expert_layer_offset (and num_experts > 1), else a dense SwiGLU.
// RMSNorms before each; final_layernorm; lm_head tied or not.
//
// sliding_window is refused unless null: v4.47.1 applies it only in its flash-attention path
// (eager and SDPA attend to every position), so what a model with one computes depends on the
// attention implementation. mamba_proj_bias (biases on in_proj / out_proj), mamba_conv_bias
// false and a hidden_act other than silu (it is also the Mamba layers' activation) are refused.
#include "absl/strings/str_cat.h"
#include "kernels/common/status_macros.h"
#include "server/model/architectures/architecture.h"
#include "server/model/architectures/mamba.h"
#include "server/model/architectures/tensor_names.h"

namespace attnserve::model::architectures {
namespace {

// JambaConfig._check_supported_offset: offset < period.
absl::StatusOr<std::pair<int64_t, int64_t>> PeriodAndOffset(const ConfigJson& json,
                                                            const char* period_key,
                                                            int64_t period_default,
                                                            const char* offset_key,
                                                            int64_t offset_default) {
  ASSIGN_OR_RETURN(const int64_t period, IntKey(json, period_key, period_default));
  ASSIGN_OR_RETURN(const int64_t offset, IntKey(json, offset_key, offset_default));
  if (period < 1) return Unsupported(period_key, absl::StrCat(period), "it must be >= 1");
  if (offset < 0 || offset >= period) {
    return Unsupported(offset_key, absl::StrCat(offset),
                       absl::StrCat("it must be in [0, ", period_key, " = ", period, ")"));
  }
  return std::make_pair(period, offset);
}

absl::StatusOr<v1::ModelConfig> ReadJambaConfig(const ConfigJson& json) {
  v1::ModelConfig c;
  c.set_model_type("jamba");
  ASSIGN_OR_RETURN(const int64_t vocab, IntKey(json, "vocab_size", 65536));
  ASSIGN_OR_RETURN(const int64_t hidden, IntKey(json, "hidden_size", 4096));
  ASSIGN_OR_RETURN(const int64_t mlp, IntKey(json, "intermediate_size", 14336));
  ASSIGN_OR_RETURN(const int64_t layers, LayerCount(json, "num_hidden_layers", 32));
  ASSIGN_OR_RETURN(const int64_t heads, IntKey(json, "num_attention_heads", 32));
  ASSIGN_OR_RETURN(const int64_t kv_heads, IntKey(json, "num_key_value_heads", 8));
  ASSIGN_OR_RETURN(const std::string act, StringKey(json, "hidden_act", "silu"));
  ASSIGN_OR_RETURN(const double eps, NumberKey(json, "rms_norm_eps", 1e-6));
  ASSIGN_OR_RETURN(const int64_t max_positions, IntKey(json, "max_position_embeddings", 262144));
  ASSIGN_OR_RETURN(const bool tie, BoolKey(json, "tie_word_embeddings", false));
  ASSIGN_OR_RETURN(const int64_t experts, IntKey(json, "num_experts", 16));
  ASSIGN_OR_RETURN(const int64_t top_k, IntKey(json, "num_experts_per_tok", 2));
  ASSIGN_OR_RETURN(const auto attn,
                   PeriodAndOffset(json, "attn_layer_period", 8, "attn_layer_offset", 4));
  ASSIGN_OR_RETURN(const auto expert,
                   PeriodAndOffset(json, "expert_layer_period", 2, "expert_layer_offset", 1));
  if (Has(json, "sliding_window")) {
    ASSIGN_OR_RETURN(const int64_t window, IntKey(json, "sliding_window", 0));
    return Unsupported("sliding_window", absl::StrCat(window),
                       "transformers applies it in its flash-attention path only; null is");
  }
  if (act != "silu") return Unsupported("hidden_act", act, "silu is");
  if (heads <= 0 || hidden % heads != 0) {
    return Unsupported("num_attention_heads", absl::StrCat(heads),
                       absl::StrCat("it must divide hidden_size ", hidden));
  }
  if (experts < 1) return Unsupported("num_experts", absl::StrCat(experts), "it must be >= 1");

  RETURN_IF_ERROR(ReadPrefixedMambaKeys(json, &c));
  c.set_vocab_size(vocab);
  c.set_hidden_size(hidden);
  c.set_intermediate_size(mlp);
  c.set_num_heads(heads);
  c.set_num_key_value_heads(kv_heads);
  c.set_norm_epsilon(eps);
  c.set_max_sequence_length(max_positions);
  c.set_tie_word_embeddings(tie);
  c.set_mamba_bcdt_rms_eps(eps);
  c.set_mamba_bcdt_norm_weights(true);
  // num_experts 1: transformers' layers_num_experts is 1 everywhere, every MLP dense.
  if (experts > 1) {
    c.set_num_experts(experts);
    c.set_num_experts_per_tok(top_k);
    c.set_moe_router("softmax_topk");
  }
  for (int64_t i = 0; i < layers; ++i) {
    c.add_layers(i % attn.first == attn.second ? "standard" : "mamba");
    if (experts > 1) c.add_expert_layers(i % expert.first == expert.second);
  }
  return c;
}

}  // namespace

extern const Architecture kJamba = {"jamba", "JambaForCausalLM", &ReadJambaConfig,
                                    &HybridDecoderModelName, nullptr};

}  // namespace attnserve::model::architectures

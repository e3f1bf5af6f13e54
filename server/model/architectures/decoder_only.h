// What the Llama family's config.json keys and tensor names share (LlamaForCausalLM and the
// architectures built on it: Mistral, Qwen2): transformers v4.47.1's configuration_llama.py and
// modeling_llama.py (commit 241c04d36867259cdf11dbb4e9d9a60f9cb65ebc). A decoder of standard
// attention layers (GQA, rotary positions, biases, windows) each followed by a gated MLP, RMSNorms
// before each, a final RMSNorm and lm_head (tied or not).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "attnserve/v1/model_config.pb.h"
#include "server/model/architectures/config_fields.h"

namespace attnserve::model::architectures {

// The upstream configuration class's defaults where the families differ.
struct DecoderDefaults {
  int64_t vocab_size = 32000;
  int64_t hidden_size = 4096;
  int64_t intermediate_size = 11008;
  int64_t num_hidden_layers = 32;
  int64_t num_attention_heads = 32;
  int64_t num_key_value_heads = 0;  // 0: num_attention_heads
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  bool tie_word_embeddings = false;
};

// The shared keys: vocab_size, hidden_size, intermediate_size, num_hidden_layers,
// num_attention_heads, num_key_value_heads (null: num_attention_heads), head_dim (null:
// hidden_size / num_attention_heads), hidden_act (silu or gelu_pytorch_tanh), rms_norm_eps,
// rope_theta, partial_rotary_factor, rope_scaling (rope_type or its old name type, and the
// type's keys), max_position_embeddings (and original_max_position_embeddings, longrope's),
// attention_bias (q, k, v and o), mlp_bias, tie_word_embeddings. Every layer "standard", no window.
// The longest sequence (max_sequence_length): max_position_embeddings, times rope_scaling's
// factor for the types that stretch a trained length by it (linear, dynamic, yarn, and longrope
// without original_max_position_embeddings); llama3's and longrope's with it are the extended
// length already.
absl::StatusOr<v1::ModelConfig> ReadDecoderOnlyConfig(const ConfigJson& json,
                                                      const DecoderDefaults& defaults);

// model.embed_tokens -> backbone.embeddings, model.layers.N.input_layernorm -> ....norm,
// self_attn.* -> mixer.*, post_attention_layernorm -> mlp_norm, mlp.* as it is, model.norm ->
// backbone.norm_f, lm_head as it is; self_attn.rotary_emb.inv_freq -> "" (not used). Other names
// come back unchanged (the loader reports them as unexpected).
std::string DecoderOnlyModelName(const std::string& stored);

}  // namespace attnserve::model::architectures

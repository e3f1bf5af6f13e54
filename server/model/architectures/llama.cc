// LlamaForCausalLM (model_type "llama"): transformers v4.47.1,
// src/transformers/models/llama/{configuration,modeling}_llama.py, commit
// 241c04d36867259cdf11dbb4e9d9a60f9cb65ebc. Every layer standard attention (GQA, rotary
// positions of any rope_scaling type, attention_bias on q/k/v/o) and a gated MLP (mlp_bias);
// RMSNorms; lm_head tied or not. SmolLM, Llama 2/3.x, TinyLlama, Granite 3 dense's base layout.
#include "server/model/architectures/architecture.h"
#include "server/model/architectures/decoder_only.h"

namespace attnserve::model::architectures {
namespace {

absl::StatusOr<v1::ModelConfig> ReadLlamaConfig(const ConfigJson& json) {
  absl::StatusOr<v1::ModelConfig> c = ReadDecoderOnlyConfig(json, DecoderDefaults{});
  if (c.ok()) c->set_model_type("llama");
  return c;
}

}  // namespace

extern const Architecture kLlama = {"llama", "LlamaForCausalLM", &ReadLlamaConfig,
                                    &DecoderOnlyModelName, nullptr};

}  // namespace attnserve::model::architectures

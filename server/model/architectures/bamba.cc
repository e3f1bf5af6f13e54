// BambaForCausalLM (model_type "bamba": IBM's Bamba-9B): transformers'
// src/transformers/models/bamba/modeling_bamba.py at commit
// 4a1fec8d3edccd2969770b7e593ef0d0533c567d (BambaConfig and BambaModel; transformers 4.47.1
// has neither). Layer i is standard attention where attn_layer_indices lists it (GQA, scores by
// head_dim^-1/2, rotary positions over the first partial_rotary_factor (0.5) of each head:
// rotate_half within those dims, the base over that width), else the mamba2 mixer (the
// mamba_n_* keys: ReadMambaNKeys, mamba.h); each followed by a SwiGLU MLP (feed_forward). RMSNorms
// input_layernorm, pre_ff_layernorm and final_layernorm; lm_head tied or not.
//
// llama.cpp c9ced49 rotates other dimension pairs in Bamba's partial rotary positions (0.79 of
// max |logit| off on the golden folder, ../shared/peers/README.md), so the reference here is the
// float64 port of upstream (../shared/hf_reference/hybrid_ref.py), which attnserve follows.
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/common/status_macros.h"
#include "server/model/architectures/architecture.h"
#include "server/model/architectures/decoder_only.h"
#include "server/model/architectures/mamba.h"
#include "server/model/architectures/tensor_names.h"

namespace attnserve::model::architectures {
namespace {

absl::StatusOr<v1::ModelConfig> ReadBambaConfig(const ConfigJson& json) {
  DecoderDefaults defaults;  // BambaConfig's
  defaults.vocab_size = 128000;
  defaults.intermediate_size = 14336;
  defaults.num_key_value_heads = 8;
  defaults.max_position_embeddings = 262144;
  defaults.rms_norm_eps = 1e-5;
  ASSIGN_OR_RETURN(v1::ModelConfig c, ReadDecoderOnlyConfig(json, defaults));
  c.set_model_type("bamba");
  if (!Has(json, "partial_rotary_factor")) c.set_partial_rotary_factor(0.5);  // BambaConfig's
  ASSIGN_OR_RETURN(const std::vector<double> attention, NumberListKey(json, "attn_layer_indices"));
  const int layers = c.layers_size();
  std::vector<bool> is_attention(layers, false);
  for (double index : attention) {
    if (index < 0 || index >= layers || index != static_cast<int>(index)) {
      return Unsupported("attn_layer_indices", absl::StrCat(index),
                         absl::StrCat("each must be a layer index below ", layers));
    }
    is_attention[static_cast<int>(index)] = true;
  }
  c.clear_layers();
  for (int i = 0; i < layers; ++i) c.add_layers(is_attention[i] ? "standard" : "mamba2");
  RETURN_IF_ERROR(ReadMambaNKeys(json, &c));
  return c;
}

}  // namespace

extern const Architecture kBamba = {"bamba", "BambaForCausalLM", &ReadBambaConfig,
                                    &HybridDecoderModelName, nullptr};

}  // namespace attnserve::model::architectures

// Qwen2ForCausalLM (model_type "qwen2"): transformers v4.47.1,
// src/transformers/models/qwen2/{configuration,modeling}_qwen2.py, commit
// 241c04d36867259cdf11dbb4e9d9a60f9cb65ebc. Llama's layers (decoder_only.h) with biases on
// q_proj, k_proj and v_proj (not o_proj), RoPE theta from config.json (1e6 in the released
// models). use_sliding_window (false in every released model) puts `sliding_window` on the layers
// from max_window_layers on, as Qwen2's attention layers ask for it (layer_idx >=
// max_window_layers) and vLLM serves it; v4.47.1's eager and SDPA masks put it on every layer
// instead, an inconsistency of that release (docs/models.md). A `layer_types` list
// ("full_attention" / "sliding_attention", newer transformers' form) takes precedence.
#include "absl/strings/str_cat.h"
#include "kernels/common/status_macros.h"
#include "server/model/architectures/architecture.h"
#include "server/model/architectures/decoder_only.h"

namespace attnserve::model::architectures {
namespace {

absl::StatusOr<v1::ModelConfig> ReadQwen2Config(const ConfigJson& json) {
  DecoderDefaults defaults;
  defaults.vocab_size = 151936;
  defaults.intermediate_size = 22016;
  defaults.max_position_embeddings = 32768;
  ASSIGN_OR_RETURN(v1::ModelConfig c, ReadDecoderOnlyConfig(json, defaults));
  c.set_model_type("qwen2");
  c.set_attention_qkv_bias(true);
  c.set_attention_out_bias(false);
  ASSIGN_OR_RETURN(const bool use_window, BoolKey(json, "use_sliding_window", false));
  ASSIGN_OR_RETURN(const int64_t window, IntKey(json, "sliding_window", 4096));
  ASSIGN_OR_RETURN(const int64_t first_windowed, IntKey(json, "max_window_layers", 28));
  ASSIGN_OR_RETURN(const std::vector<std::string> layer_types, StringListKey(json, "layer_types"));
  if (!layer_types.empty() && static_cast<int>(layer_types.size()) != c.layers_size()) {
    return Unsupported("layer_types", absl::StrCat(layer_types.size(), " entries"),
                       absl::StrCat("one per layer: ", c.layers_size()));
  }
  if (window < 0) return Unsupported("sliding_window", absl::StrCat(window), "it must be >= 0");
  for (int i = 0; i < c.layers_size(); ++i) {
    bool windowed = use_window && i >= first_windowed;
    if (!layer_types.empty()) {
      if (layer_types[i] != "full_attention" && layer_types[i] != "sliding_attention") {
        return Unsupported("layer_types", layer_types[i],
                           "full_attention and sliding_attention are");
      }
      windowed = layer_types[i] == "sliding_attention";
    }
    c.add_attention_windows(windowed ? window : 0);
  }
  return c;
}

}  // namespace

extern const Architecture kQwen2 = {"qwen2", "Qwen2ForCausalLM", &ReadQwen2Config,
                                    &DecoderOnlyModelName, nullptr};

}  // namespace attnserve::model::architectures

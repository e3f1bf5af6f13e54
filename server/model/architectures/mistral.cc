// MistralForCausalLM (model_type "mistral"): transformers v4.47.1,
// src/transformers/models/mistral/{configuration,modeling}_mistral.py, commit
// 241c04d36867259cdf11dbb4e9d9a60f9cb65ebc. Llama's layers (decoder_only.h) without biases, and
// `sliding_window` (null: none) on every layer: the query at position p attends to positions
// p - W + 1 .. p (the eager mask keeps key > p - W), over a cache that keeps every position.
#include "absl/strings/str_cat.h"
#include "kernels/common/status_macros.h"
#include "server/model/architectures/architecture.h"
#include "server/model/architectures/decoder_only.h"

namespace attnserve::model::architectures {
namespace {

absl::StatusOr<v1::ModelConfig> ReadMistralConfig(const ConfigJson& json) {
  DecoderDefaults defaults;
  defaults.intermediate_size = 14336;
  defaults.num_key_value_heads = 8;
  defaults.max_position_embeddings = 4096 * 32;
  ASSIGN_OR_RETURN(v1::ModelConfig c, ReadDecoderOnlyConfig(json, defaults));
  c.set_model_type("mistral");
  ASSIGN_OR_RETURN(const int64_t window, IntKey(json, "sliding_window", 4096));
  if (window < 0) return Unsupported("sliding_window", absl::StrCat(window), "it must be >= 0");
  // Absent: MistralConfig's 4096; null: no window.
  const bool null_window =
      json.fields().count("sliding_window") > 0 && !Has(json, "sliding_window");
  const int64_t w = null_window ? 0 : window;
  for (int i = 0; i < c.layers_size(); ++i) c.add_attention_windows(w);
  return c;
}

}  // namespace

extern const Architecture kMistral = {"mistral", "MistralForCausalLM", &ReadMistralConfig,
                                      &DecoderOnlyModelName, nullptr};

}  // namespace attnserve::model::architectures

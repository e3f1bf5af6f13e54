#include "server/model/default_models.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/common/status_macros.h"
#include "server/model/model_config.h"

namespace attnserve::model {
namespace {
constexpr int64_t kWidth = 256;
constexpr int kDepth = 4;
constexpr int64_t kVocab = 4096;
constexpr uint64_t kSeed = 20261129;
}  // namespace

std::vector<std::string> DefaultModelNames() {
  return {"standard",       "linformer", "linear", "mamba", "hybrid",
          "sliding_window", "performer", "rwkv",   "sparse"};
}

absl::StatusOr<v1::ModelConfig> DefaultModelConfig(const std::string& name) {
  v1::ModelConfig c;
  c.set_model_type("attnserve");
  c.set_vocab_size(kVocab);
  c.set_hidden_size(kWidth);
  c.set_num_heads(4);  // head_dim 64
  c.set_tie_word_embeddings(true);
  if (name == "standard" || name == "linformer" || name == "linear" || name == "sliding_window" ||
      name == "performer" || name == "sparse") {
    for (int i = 0; i < kDepth; ++i) c.add_layers(name);
    c.set_intermediate_size(2 * kWidth);
    if (name == "sliding_window") {
      c.set_sliding_window(1024);
      c.set_sliding_window_sinks(4);  // StreamingLLM's four attention sinks
    }
    if (name == "performer") c.set_performer_seed(kSeed);
    if (name == "sparse") {
      // l = 128 ≈ √16K: a step reads the last 128 keys and every 128th before them.
      c.set_sparse_pattern("strided");
      c.set_sparse_stride(128);
    }
  } else if (name == "rwkv") {
    // Channel mixing as wide as the others' MLPs; Hugging Face RWKV's norms.
    for (int i = 0; i < kDepth; ++i) c.add_layers("rwkv");
    c.set_intermediate_size(2 * kWidth);
    c.set_norm("layer_norm");
    c.set_embedding_norm(true);
  } else if (name == "mamba") {
    for (int i = 0; i < kDepth; ++i) c.add_layers("mamba");
  } else if (name == "hybrid") {
    // One attention layer in four, after three Mamba layers, as Jamba interleaves them.
    for (const char* layer : {"mamba", "mamba", "mamba", "standard"}) c.add_layers(layer);
  } else {
    return absl::NotFoundError(absl::StrCat("no default model '", name, "'; the defaults are ",
                                            absl::StrJoin(DefaultModelNames(), ", ")));
  }
  // Linformer's E and F are (max_len, k): its max length is its limit.
  c.set_linformer_k(64);
  c.set_linformer_max_len(32768);
  c.set_max_sequence_length(name == "linformer" ? 32768 : name == "standard" ? 65536 : 1 << 20);
  FillModelConfigDefaults(&c);
  RETURN_IF_ERROR(ValidateModelConfig(c));
  return c;
}

absl::StatusOr<std::unique_ptr<Model>> BuildDefaultModel(const std::string& name,
                                                         const ModelOptions& options) {
  ASSIGN_OR_RETURN(v1::ModelConfig config, DefaultModelConfig(name));
  uint64_t seed = kSeed;
  for (char ch : name) seed = seed * 131 + static_cast<unsigned char>(ch);
  // Drawn on the CPU, so the same seed gives the same weights on every device.
  absl::StatusOr<std::unique_ptr<Model>> model =
      Model::Create(name, config, Model::RandomWeights(config, seed), options);
  if (model.ok()) (*model)->set_text(ByteLevelModelText());
  return model;
}

}  // namespace attnserve::model

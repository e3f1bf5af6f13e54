// The built-in models the server runs with when no repository is given: one per mixer plus
// a hybrid, all 4 layers of width 256 over the same 4096-token vocabulary, weights drawn from
// fixed seeds, so the server works out of the box and the variants compare fairly.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/model/model.h"

namespace attnserve::model {

// "standard", "linformer", "linear", "mamba", "hybrid" (mamba, mamba, mamba, standard),
// "sliding_window" (a window of 1024 tokens), "performer", "rwkv" (Hugging Face RWKV's layout:
// LayerNorms, an embedding norm; written by attnserve-export-model as an RwkvForCausalLM folder),
// "sparse" (Sparse Transformer attention, the strided pattern with stride 128).
std::vector<std::string> DefaultModelNames();

absl::StatusOr<v1::ModelConfig> DefaultModelConfig(const std::string& name);

// The same weights on every call and every machine; the byte-level tokenizer
// (ByteLevelModelText).
absl::StatusOr<std::unique_ptr<Model>> BuildDefaultModel(const std::string& name,
                                                         const ModelOptions& options = {});

}  // namespace attnserve::model

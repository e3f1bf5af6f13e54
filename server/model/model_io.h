// Model folders on disk: config.json + model.safetensors (or shards listed by
// model.safetensors.index.json). Hugging Face folders of the registered architectures
// (architectures/architecture.h: Mamba, RWKV-4, Llama, Mistral, Qwen2) load as they are, their
// names mapped onto Model's; a pure Mamba or RWKV model is written in their layout, any other in
// attnserve's.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/model/model.h"

namespace attnserve::model {

// Loads `dir`/config.json and `dir`/model.safetensors (F32, F16 or BF16), or the shards
// `dir`/model.safetensors.index.json maps every tensor to, as model `name`.
// With a tokenizer.json the model takes text (model_text.h).
// Every tensor is checked against the shape the config implies before its data is read;
// errors name the folder, the tensor and both shapes.
absl::StatusOr<std::unique_ptr<Model>> LoadModelFolder(const std::string& dir, std::string name,
                                                       const ModelOptions& options = {});

// Writes `model` to `dir` (created if missing): config.json and model.safetensors (F32), and
// tokenizer.json when the model has a tokenizer.
absl::Status WriteModelFolder(const Model& model, const std::string& dir);

}  // namespace attnserve::model

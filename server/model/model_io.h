// Model folders on disk: config.json + model.safetensors. Hugging Face Mamba and RWKV folders
// load as they are (RWKV's names are mapped onto Model's); a pure Mamba or RWKV model is written
// in their layout, any other in attnserve's.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/model/model.h"

namespace attnserve::model {

// Loads `dir`/config.json and `dir`/model.safetensors (F32, F16 or BF16) as model `name`.
// With a tokenizer.json the model takes text (model_text.h).
// Every tensor is checked against the shape the config implies before its data is read;
// errors name the folder, the tensor and both shapes.
absl::StatusOr<std::unique_ptr<Model>> LoadModelFolder(const std::string& dir, std::string name,
                                                       const ModelOptions& options = {});

// Writes `model` to `dir` (created if missing): config.json and model.safetensors (F32), and
// tokenizer.json when the model has a tokenizer.
absl::Status WriteModelFolder(const Model& model, const std::string& dir);

}  // namespace attnserve::model

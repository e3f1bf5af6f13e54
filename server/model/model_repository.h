// The models a server serves, by name: the folders of a repository directory (each with a
// config.json and model.safetensors; the folder name is the model name) or the built-in
// defaults. Immutable after loading; safe to read from many threads.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/model/model.h"

namespace attnserve::model {

class ModelRepository {
 public:
  // Loads every subfolder of `dir` that holds a config.json; a folder that fails to load is an
  // error naming it. An empty repository is an error.
  // The models are made with `options` (device, weight precision: see Model::Create).
  static absl::StatusOr<std::unique_ptr<ModelRepository>> LoadFolder(
      const std::string& dir, const ModelOptions& options = {});
  // The built-in models of default_models.h.
  static absl::StatusOr<std::unique_ptr<ModelRepository>> BuildDefault(
      const ModelOptions& options = {});

  // Models built elsewhere (benchmarks, tests), under their own names; INVALID_ARGUMENT for
  // none or a repeated name.
  static absl::StatusOr<std::unique_ptr<ModelRepository>> FromModels(
      std::vector<std::unique_ptr<Model>> models);

  // Null when there is no such model.
  const Model* Find(const std::string& name) const;
  // Sorted by name.
  std::vector<const Model*> models() const;
  // Seconds it took to load or build each model.
  double load_seconds(const std::string& name) const;

 private:
  struct Entry {
    std::unique_ptr<Model> model;
    double load_seconds = 0;
  };
  std::map<std::string, Entry> models_;
};

}  // namespace attnserve::model

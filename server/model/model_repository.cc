#include "server/model/model_repository.h"

#include <chrono>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "server/model/default_models.h"
#include "server/model/model_io.h"

namespace attnserve::model {
namespace {

template <typename Fn>
auto Timed(double* seconds, Fn&& fn) {
  const auto start = std::chrono::steady_clock::now();
  auto result = fn();
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ModelRepository>> ModelRepository::LoadFolder(
    const std::string& dir, const ModelOptions& options) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat("model repository ", dir, " is not a directory"));
  }
  auto repo = std::unique_ptr<ModelRepository>(new ModelRepository());
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    if (!entry.is_directory() || !fs::exists(entry.path() / "config.json")) continue;
    const std::string name = entry.path().filename().string();
    Entry e;
    absl::StatusOr<std::unique_ptr<Model>> model = Timed(
        &e.load_seconds, [&] { return LoadModelFolder(entry.path().string(), name, options); });
    if (!model.ok()) {
      return absl::Status(model.status().code(),
                          absl::StrCat("model '", name, "': ", model.status().message()));
    }
    e.model = *std::move(model);
    repo->models_[name] = std::move(e);
  }
  if (ec) return absl::InternalError(absl::StrCat("cannot list ", dir, ": ", ec.message()));
  if (repo->models_.empty()) {
    return absl::NotFoundError(
        absl::StrCat("model repository ", dir, " has no model folders (with a config.json)"));
  }
  return repo;
}

absl::StatusOr<std::unique_ptr<ModelRepository>> ModelRepository::BuildDefault(
    const ModelOptions& options) {
  auto repo = std::unique_ptr<ModelRepository>(new ModelRepository());
  for (const std::string& name : DefaultModelNames()) {
    Entry e;
    absl::StatusOr<std::unique_ptr<Model>> model =
        Timed(&e.load_seconds, [&] { return BuildDefaultModel(name, options); });
    if (!model.ok()) return model.status();
    e.model = *std::move(model);
    repo->models_[name] = std::move(e);
  }
  return repo;
}

absl::StatusOr<std::unique_ptr<ModelRepository>> ModelRepository::FromModels(
    std::vector<std::unique_ptr<Model>> models) {
  if (models.empty()) return absl::InvalidArgumentError("a repository needs a model");
  auto repo = std::unique_ptr<ModelRepository>(new ModelRepository());
  for (std::unique_ptr<Model>& m : models) {
    const std::string name = m->name();
    Entry e;
    e.model = std::move(m);
    if (!repo->models_.emplace(name, std::move(e)).second) {
      return absl::InvalidArgumentError("two models named '" + name + "'");
    }
  }
  return repo;
}

const Model* ModelRepository::Find(const std::string& name) const {
  auto it = models_.find(name);
  return it == models_.end() ? nullptr : it->second.model.get();
}

std::vector<const Model*> ModelRepository::models() const {
  std::vector<const Model*> out;
  for (const auto& [name, e] : models_) out.push_back(e.model.get());
  return out;
}

double ModelRepository::load_seconds(const std::string& name) const {
  auto it = models_.find(name);
  return it == models_.end() ? 0 : it->second.load_seconds;
}

}  // namespace attnserve::model

// attnserve-export-model: writes models to disk as model folders (a pure Mamba or RWKV model in
// the Hugging Face layout): the built-in defaults, e.g. to start a repository of one's own, or a
// model of any architecture given by a config.json with random weights, e.g. a
// mamba-130m-shaped model for benchmarks (bench/model_throughput.py).
#include <fstream>
#include <iostream>
#include <sstream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_split.h"
#include "common/parse_flags.h"
#include "server/model/default_models.h"
#include "server/model/model_config.h"
#include "server/model/model_io.h"

ABSL_FLAG(std::string, models, "all",
          "Comma-separated default models to write (standard, linformer, linear, mamba, "
          "hybrid, sliding_window, performer, rwkv, sparse), or all. Ignored with --config.");
ABSL_FLAG(std::string, config, "",
          "A config.json (attnserve's, Hugging Face Mamba's or RWKV's): write one model of that "
          "architecture with random weights drawn from --seed, named --name.");
ABSL_FLAG(std::string, name, "model", "With --config: the model's name (its folder).");
ABSL_FLAG(uint64_t, seed, 1, "With --config: the random weights' seed.");
ABSL_FLAG(std::string, out, "", "Repository folder to write into: one subfolder per model.");

namespace {

int Fail(const std::string& message) {
  std::cerr << "attnserve-export-model: " << message << "\n";
  return 1;
}

absl::StatusOr<std::unique_ptr<attnserve::model::Model>> RandomModelFromConfig(
    const std::string& path, const std::string& name, uint64_t seed) {
  using attnserve::model::Model;
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("cannot read " + path);
  std::stringstream json;
  json << in.rdbuf();
  absl::StatusOr<attnserve::v1::ModelConfig> config =
      attnserve::model::ParseModelConfigJson(json.str());
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        path + ": " + std::string(config.status().message()));
  }
  return Model::Create(name, *config, Model::RandomWeights(*config, seed));
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "attnserve-export-model --models=mamba,hybrid --out=/path/to/repository\n"
      "attnserve-export-model --config=config.json --name=mamba-130m --out=/path/to/repository");
  attnserve::ParseFlags(argc, argv);
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) return Fail("--out is required");

  std::vector<std::unique_ptr<attnserve::model::Model>> models;
  if (!absl::GetFlag(FLAGS_config).empty()) {
    auto model = RandomModelFromConfig(absl::GetFlag(FLAGS_config), absl::GetFlag(FLAGS_name),
                                       absl::GetFlag(FLAGS_seed));
    if (!model.ok()) return Fail(std::string(model.status().message()));
    models.push_back(*std::move(model));
  } else {
    std::vector<std::string> names = attnserve::model::DefaultModelNames();
    if (absl::GetFlag(FLAGS_models) != "all") {
      names = absl::StrSplit(absl::GetFlag(FLAGS_models), ',', absl::SkipEmpty());
    }
    for (const std::string& name : names) {
      auto model = attnserve::model::BuildDefaultModel(name);
      if (!model.ok()) return Fail(std::string(model.status().message()));
      models.push_back(*std::move(model));
    }
  }
  for (const auto& model : models) {
    const std::string dir = out + "/" + model->name();
    if (auto s = attnserve::model::WriteModelFolder(*model, dir); !s.ok()) {
      return Fail(std::string(s.message()));
    }
    std::cout << "wrote " << dir << "\n";
  }
  return 0;
}

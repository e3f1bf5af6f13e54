#include "server/model/model_io.h"

#include <ATen/ATen.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kernels/common/status_macros.h"
#include "kernels/common/tensor_checks.h"
#include "server/model/architectures/architecture.h"
#include "server/model/model_config.h"
#include "server/model/python_json.h"
#include "server/model/safetensors.h"
#include "server/model/torch_pickle.h"

namespace attnserve::model {
namespace {

namespace fs = std::filesystem;

absl::StatusOr<std::string> ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path.string()));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A stored name as Model knows it: the architecture's mapping (architectures/), or for
// attnserve's own layout the name itself, but for mamba_ssm's spelling of the embedding
// ("backbone.embedding.weight"; Hugging Face adds an "s").
std::string ModelNameOf(const architectures::Architecture* architecture,
                        const std::string& stored) {
  if (architecture != nullptr) return architecture->model_name(stored);
  return stored == "backbone.embedding.weight" ? "backbone.embeddings.weight" : stored;
}

// A stored tensor's parts as Model's tensors: the architecture's model_tensors where it has
// one, else all of it under ModelNameOf's name.
std::vector<architectures::TensorPart> ModelTensorsOf(
    const architectures::Architecture* architecture, const std::string& stored,
    const v1::ModelConfig& config) {
  if (architecture != nullptr && architecture->model_tensors != nullptr) {
    return architecture->model_tensors(stored, config);
  }
  return {{ModelNameOf(architecture, stored)}};
}

// The checkpoint's files: model.safetensors, or the shards model.safetensors.index.json's
// weight_map names (every tensor in the one file the map gives it), or, where neither is,
// torch.save's pytorch_model.bin (mamba_ssm's folders; torch_pickle.h).
struct Checkpoint {
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::vector<std::string> paths;
  // (stored name, index into files) in file order.
  std::vector<std::pair<std::string, size_t>> tensors;
};

absl::StatusOr<Checkpoint> OpenCheckpoint(const fs::path& folder) {
  Checkpoint checkpoint;
  const fs::path single = folder / "model.safetensors";
  const fs::path index = folder / "model.safetensors.index.json";
  std::error_code ec;
  const fs::path pickle = folder / "pytorch_model.bin";
  if (!fs::exists(single, ec) && !fs::exists(index, ec) && fs::exists(pickle, ec)) {
    ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, OpenTorchPickle(pickle.string()));
    for (const std::string& name : file->names()) checkpoint.tensors.emplace_back(name, 0);
    checkpoint.files.push_back(std::move(file));
    checkpoint.paths.push_back(pickle.string());
    return checkpoint;
  }
  if (fs::exists(single, ec) || !fs::exists(index, ec)) {
    ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::Open(single.string()));
    for (const std::string& name : file->names()) checkpoint.tensors.emplace_back(name, 0);
    checkpoint.files.push_back(std::move(file));
    checkpoint.paths.push_back(single.string());
    return checkpoint;
  }
  ASSIGN_OR_RETURN(const std::string json, ReadFile(index));
  google::protobuf::Struct root;
  if (!google::protobuf::util::JsonStringToMessage(json, &root).ok() ||
      !root.fields().count("weight_map") ||
      root.fields().at("weight_map").kind_case() != google::protobuf::Value::kStructValue) {
    return absl::InvalidArgumentError(
        absl::StrCat(index.string(), ": expected a JSON object with a weight_map object"));
  }
  const auto& map = root.fields().at("weight_map").struct_value().fields();
  std::map<std::string, size_t> file_of_shard;
  std::map<std::string, std::string> shard_of;  // in name order: deterministic
  for (const auto& [tensor, shard] : map) {
    if (shard.kind_case() != google::protobuf::Value::kStringValue ||
        shard.string_value().find('/') != std::string::npos || shard.string_value().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(index.string(), ": weight_map['", tensor,
                                                     "'] must name a file in the folder"));
    }
    shard_of[tensor] = shard.string_value();
  }
  for (const auto& [tensor, shard] : shard_of) {
    if (!file_of_shard.count(shard)) {
      const std::string path = (folder / shard).string();
      ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::Open(path));
      file_of_shard[shard] = checkpoint.files.size();
      checkpoint.files.push_back(std::move(file));
      checkpoint.paths.push_back(path);
    }
  }
  // Every tensor of every shard, each where the map says it is.
  for (size_t i = 0; i < checkpoint.files.size(); ++i) {
    const std::string shard = fs::path(checkpoint.paths[i]).filename().string();
    for (const std::string& name : checkpoint.files[i]->names()) {
      auto it = shard_of.find(name);
      if (it == shard_of.end() || it->second != shard) {
        return absl::InvalidArgumentError(
            absl::StrCat(checkpoint.paths[i], ": tensor '", name,
                         "' is not mapped to this file by model.safetensors.index.json"));
      }
      checkpoint.tensors.emplace_back(name, i);
    }
  }
  for (const auto& [tensor, shard] : shard_of) {
    if (checkpoint.files[file_of_shard[shard]]->Find(tensor) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(index.string(), ": tensor '", tensor,
                                                     "' is not in ", shard, " as the map says"));
    }
  }
  return checkpoint;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> LoadModelFolder(const std::string& dir, std::string name,
                                                       const ModelOptions& options) {
  const fs::path folder(dir);
  ASSIGN_OR_RETURN(std::string json, ReadFile(folder / "config.json"));
  absl::StatusOr<v1::ModelConfig> config = ParseModelConfigJson(json);
  if (!config.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, "/config.json: ", config.status().message()));
  }
  const architectures::Architecture* architecture =
      architectures::FindArchitecture(config->model_type());
  ASSIGN_OR_RETURN(const Checkpoint checkpoint, OpenCheckpoint(folder));

  std::map<std::string, std::vector<int64_t>> expected;
  for (const kernels::WeightSpec& spec : Model::ExpectedTensors(*config)) {
    expected[spec.name] = spec.shape;
  }
  std::map<std::string, at::Tensor> weights;
  for (const auto& [stored, file_index] : checkpoint.tensors) {
    const std::string& weights_path = checkpoint.paths[file_index];
    const SafetensorsFile& file = *checkpoint.files[file_index];
    const SafetensorsEntry* entry = file.Find(stored);
    at::Tensor loaded;  // read once, whatever its parts
    for (const architectures::TensorPart& part : ModelTensorsOf(architecture, stored, *config)) {
      const std::string& canonical = part.name;
      if (canonical.empty()) continue;  // a buffer the model does not use
      auto it = expected.find(canonical);
      if (it == expected.end()) {
        // Some exports keep a tied lm_head; it is the embedding, so it is not needed.
        if (canonical == "lm_head.weight" && config->tie_word_embeddings()) continue;
        return absl::InvalidArgumentError(absl::StrCat(weights_path, ": unexpected tensor '",
                                                       stored, "' (not part of a model with this ",
                                                       "config.json)"));
      }
      std::vector<int64_t> shape = entry->shape;
      const bool selected = part.index >= 0;
      if (selected) {
        if (shape.empty() || part.index >= shape[0]) {
          shape = {-1};  // no such entry: reported below
        } else {
          shape.erase(shape.begin());
        }
      }
      const bool whole = part.length < 0;
      if (!whole) {
        if (part.dim >= static_cast<int64_t>(shape.size()) ||
            part.start + part.length > shape[part.dim]) {
          shape.clear();  // cannot hold the part: reported below
        } else {
          shape[part.dim] = part.length;
        }
      }
      if (at::IntArrayRef(shape) != at::IntArrayRef(it->second)) {
        return absl::InvalidArgumentError(absl::StrCat(
            weights_path, ": tensor '", stored, "' has shape ", kernels::ShapeString(entry->shape),
            ", config.json implies ", kernels::ShapeString(it->second),
            whole && !selected ? "" : absl::StrCat(" for its part '", canonical, "'")));
      }
      if (!loaded.defined()) {
        ASSIGN_OR_RETURN(loaded, file.LoadFloat32(stored));
      }
      at::Tensor value = selected ? loaded.select(0, part.index) : loaded;
      if (!whole) value = value.narrow(part.dim, part.start, part.length);
      if (auto held = weights.find(canonical); held != weights.end()) {
        // A tied tensor saved under each of its names (a shared block at every layer using it)
        // is the same tensor each time.
        if (!at::equal(held->second, value)) {
          return absl::InvalidArgumentError(absl::StrCat(
              weights_path, ": tensor '", canonical, "' is stored twice, with different values"));
        }
        continue;
      }
      weights[canonical] = whole && !selected ? value : value.contiguous();
    }
  }
  for (const auto& [tensor, shape] : expected) {
    if (!weights.count(tensor)) {
      return absl::InvalidArgumentError(absl::StrCat(dir, ": missing tensor '", tensor,
                                                     "' of shape ", kernels::ShapeString(shape)));
    }
  }
  if (architecture != nullptr && architecture->fold_weights != nullptr) {
    architectures::ConfigJson root;  // parsed once already by ParseModelConfigJson
    if (!google::protobuf::util::JsonStringToMessage(PythonJsonToJson(json), &root).ok()) {
      return absl::InvalidArgumentError(absl::StrCat(dir, "/config.json: not a JSON object"));
    }
    if (absl::Status s = architecture->fold_weights(root, *config, &weights); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(dir, "/config.json: ", s.message()));
    }
  }
  ASSIGN_OR_RETURN(std::optional<ModelText> text, LoadModelText(dir, config->vocab_size()));
  ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
                   Model::Create(std::move(name), *std::move(config), std::move(weights), options));
  if (!text) model->set_missing_text_reason(MissingTokenizerReason(dir));
  model->set_text(std::move(text));
  return model;
}

absl::Status WriteModelFolder(const Model& model, const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  const bool rwkv = IsHuggingFaceRwkv(model.config());
  const std::string json = IsHuggingFaceMamba(model.config())
                               ? HuggingFaceMambaConfigJson(model.config())
                           : rwkv ? HuggingFaceRwkvConfigJson(model.config())
                                  : ModelConfigToJson(model.config());
  {
    std::ofstream out(fs::path(dir) / "config.json", std::ios::binary | std::ios::trunc);
    out << json;
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", dir, "/config.json"));
  }
  if (const ModelText* text = model.text(); text != nullptr) {
    std::ofstream out(fs::path(dir) / "tokenizer.json", std::ios::binary | std::ios::trunc);
    out << text->tokenizer_json;
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", dir, "/tokenizer.json"));
    if (text->chat_template.has_value()) {
      std::ofstream t(fs::path(dir) / "chat_template.jinja", std::ios::binary | std::ios::trunc);
      t << text->chat_template->source();
      if (!t) {
        return absl::InternalError(absl::StrCat("cannot write ", dir, "/chat_template.jinja"));
      }
    }
  }
  ASSIGN_OR_RETURN(auto weights, model.NamedWeights());
  if (rwkv) {
    const architectures::Architecture* layout = architectures::FindArchitecture("rwkv");
    for (auto& [name, tensor] : weights) name = layout->stored_name(name);
  }
  return WriteSafetensors((fs::path(dir) / "model.safetensors").string(), weights,
                          {{"format", "pt"}, {"written_by", "attnserve"}});
}

}  // namespace attnserve::model

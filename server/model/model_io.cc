#include "server/model/model_io.h"

#include <ATen/ATen.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kernels/common/status_macros.h"
#include "kernels/common/tensor_checks.h"
#include "server/model/model_config.h"
#include "server/model/safetensors.h"

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

// Hugging Face RwkvForCausalLM's names for Model's (model.h); the block's own tensors keep
// their names under the layer's mixer (kernels/rwkv/rwkv_block.h).
constexpr std::pair<const char*, const char*> kRwkvPrefixes[] = {
    {"rwkv.embeddings.", "backbone.embeddings."},
    {"rwkv.blocks.0.pre_ln.", "backbone.embeddings_norm."},
    {"rwkv.ln_out.", "backbone.norm_f."},
    {"head.", "lm_head."},
};

// "rwkv.blocks.N.x" <-> "backbone.layers.N.mixer.x" (N's digits up to the next dot).
std::string ReplaceLayerPrefix(const std::string& name, absl::string_view from,
                               absl::string_view from_tail, absl::string_view to,
                               absl::string_view to_tail) {
  if (!absl::StartsWith(name, from)) return name;
  const size_t dot = name.find('.', from.size());
  if (dot == std::string::npos || dot == from.size()) return name;
  const std::string rest = name.substr(dot + 1);
  if (!absl::StartsWith(rest, from_tail)) return name;
  return absl::StrCat(to, name.substr(from.size(), dot - from.size()), ".", to_tail,
                      rest.substr(from_tail.size()));
}

// A stored name as Model knows it: mamba_ssm spells the embedding "backbone.embedding.weight"
// (Hugging Face adds an "s"); Hugging Face RWKV's names are mapped onto Model's.
std::string CanonicalName(const std::string& name) {
  if (name == "backbone.embedding.weight") return "backbone.embeddings.weight";
  for (const auto& [hf, ours] : kRwkvPrefixes) {
    if (absl::StartsWith(name, hf)) return absl::StrCat(ours, name.substr(strlen(hf)));
  }
  return ReplaceLayerPrefix(name, "rwkv.blocks.", "", "backbone.layers.", "mixer.");
}

// The inverse, for writing a model for which IsHuggingFaceRwkv holds.
std::string HuggingFaceRwkvName(const std::string& name) {
  for (const auto& [hf, ours] : kRwkvPrefixes) {
    if (absl::StartsWith(name, ours)) return absl::StrCat(hf, name.substr(strlen(ours)));
  }
  return ReplaceLayerPrefix(name, "backbone.layers.", "mixer.", "rwkv.blocks.", "");
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
  const std::string weights_path = (folder / "model.safetensors").string();
  ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::Open(weights_path));

  std::map<std::string, std::vector<int64_t>> expected;
  for (const kernels::WeightSpec& spec : Model::ExpectedTensors(*config)) {
    expected[spec.name] = spec.shape;
  }
  std::map<std::string, at::Tensor> weights;
  for (const std::string& stored : file->names()) {
    const std::string canonical = CanonicalName(stored);
    auto it = expected.find(canonical);
    if (it == expected.end()) {
      // Some exports keep a tied lm_head; it is the embedding, so it is not needed.
      if (canonical == "lm_head.weight" && config->tie_word_embeddings()) continue;
      return absl::InvalidArgumentError(absl::StrCat(weights_path, ": unexpected tensor '", stored,
                                                     "' (not part of a model with this ",
                                                     "config.json)"));
    }
    const SafetensorsEntry* entry = file->Find(stored);
    if (at::IntArrayRef(entry->shape) != at::IntArrayRef(it->second)) {
      return absl::InvalidArgumentError(absl::StrCat(
          weights_path, ": tensor '", stored, "' has shape ", kernels::ShapeString(entry->shape),
          ", config.json implies ", kernels::ShapeString(it->second)));
    }
    if (weights.count(canonical)) {
      return absl::InvalidArgumentError(
          absl::StrCat(weights_path, ": the embedding is stored twice"));
    }
    ASSIGN_OR_RETURN(weights[canonical], file->LoadFloat32(stored));
  }
  for (const auto& [tensor, shape] : expected) {
    if (!weights.count(tensor)) {
      return absl::InvalidArgumentError(absl::StrCat(weights_path, ": missing tensor '", tensor,
                                                     "' of shape ", kernels::ShapeString(shape)));
    }
  }
  ASSIGN_OR_RETURN(std::optional<ModelText> text, LoadModelText(dir, config->vocab_size()));
  ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
                   Model::Create(std::move(name), *std::move(config), std::move(weights), options));
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
  }
  ASSIGN_OR_RETURN(auto weights, model.NamedWeights());
  if (rwkv) {
    for (auto& [name, tensor] : weights) name = HuggingFaceRwkvName(name);
  }
  return WriteSafetensors((fs::path(dir) / "model.safetensors").string(), weights,
                          {{"format", "pt"}, {"written_by", "attnserve"}});
}

}  // namespace attnserve::model

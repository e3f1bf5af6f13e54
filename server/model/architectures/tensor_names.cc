#include "server/model/architectures/tensor_names.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"

namespace attnserve::model::architectures {

std::string RenameLayerTensor(const std::string& stored, const NameMap& whole,
                              const NameMap& parts) {
  for (const auto& [hf, ours] : whole) {
    if (stored == hf) return ours;
  }
  constexpr absl::string_view kLayers = "model.layers.";
  if (!absl::StartsWith(stored, kLayers)) return stored;
  std::vector<std::pair<absl::string_view, absl::string_view>> replacements;
  for (const auto& [from, to] : parts) replacements.emplace_back(from, to);
  return absl::StrReplaceAll(absl::StrCat("backbone.layers.", stored.substr(kLayers.size())),
                             replacements);
}

std::string HybridDecoderModelName(const std::string& stored) {
  return HybridDecoderModelName(stored, ".mixer.");
}

std::string HybridDecoderModelName(const std::string& stored, const std::string& attention) {
  return RenameLayerTensor(stored,
                           {{"model.embed_tokens.weight", "backbone.embeddings.weight"},
                            {"model.final_layernorm.weight", "backbone.norm_f.weight"}},
                           {{".input_layernorm.", ".norm."},
                            {".pre_ff_layernorm.", ".mlp_norm."},
                            {".mamba.", ".mixer."},
                            {".self_attn.", attention},
                            {".feed_forward.", ".mlp."}});
}

bool SplitLayerName(absl::string_view stored, int* layer, absl::string_view* rest,
                    absl::string_view layers) {
  if (!absl::ConsumePrefix(&stored, layers)) return false;
  const size_t dot = stored.find('.');
  if (dot == absl::string_view::npos || !absl::SimpleAtoi(stored.substr(0, dot), layer)) {
    return false;
  }
  *rest = stored.substr(dot + 1);
  return true;
}

}  // namespace attnserve::model::architectures

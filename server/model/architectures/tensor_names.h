// Hugging Face decoder tensor names to Model's (server/model/model.h), for the architectures'
// model_name functions (architecture.h).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace attnserve::model::architectures {

using NameMap = std::vector<std::pair<std::string, std::string>>;

// `whole`'s entry for a name it lists exactly (the embedding, the final norm); else, for a name
// "model.layers.N.REST", "backbone.layers.N.REST" with `parts`' substrings replaced (absl's
// StrReplaceAll: left to right, each part of the name replaced once); other names unchanged
// (the loader reports them as unexpected).
std::string RenameLayerTensor(const std::string& stored, const NameMap& whole,
                              const NameMap& parts);

// The Mamba hybrids' decoder names, Jamba's and Bamba's: model.embed_tokens ->
// backbone.embeddings, model.final_layernorm -> backbone.norm_f, model.layers.N.{input_layernorm
// -> norm, pre_ff_layernorm -> mlp_norm, mamba. and self_attn. -> mixer., feed_forward. -> mlp.};
// lm_head as it is.
std::string HybridDecoderModelName(const std::string& stored);
// The same with self_attn. -> `attention` (Falcon-H1's ".parallel_mixer.").
std::string HybridDecoderModelName(const std::string& stored, const std::string& attention);

// "model.layers.N.REST" (or `layers` N.REST): true, with N and REST; any other name false.
bool SplitLayerName(absl::string_view stored, int* layer, absl::string_view* rest,
                    absl::string_view layers = "model.layers.");

}  // namespace attnserve::model::architectures

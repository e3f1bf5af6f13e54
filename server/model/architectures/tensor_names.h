// Hugging Face decoder tensor names to Model's (server/model/model.h), for the architectures'
// model_name functions (architecture.h).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace attnserve::model::architectures {

using NameMap = std::vector<std::pair<std::string, std::string>>;

// `whole`'s entry for a name it lists exactly (the embedding, the final norm); else, for a name
// "model.layers.N.REST", "backbone.layers.N.REST" with `parts`' substrings replaced (absl's
// StrReplaceAll: left to right, each part of the name replaced once); other names unchanged
// (the loader reports them as unexpected).
std::string RenameLayerTensor(const std::string& stored, const NameMap& whole,
                              const NameMap& parts);

}  // namespace attnserve::model::architectures

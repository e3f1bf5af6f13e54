#include "server/model/architectures/architecture.h"

namespace attnserve::model::architectures {

// Defined in their own files.
extern const Architecture kMamba;
extern const Architecture kFalconMamba;
extern const Architecture kMamba2;
extern const Architecture kMambaSsm;
extern const Architecture kRwkv;
extern const Architecture kLlama;
extern const Architecture kMistral;
extern const Architecture kQwen2;
extern const Architecture kJamba;
extern const Architecture kZamba;
extern const Architecture kZamba2;
extern const Architecture kGraniteMoeHybrid;
extern const Architecture kBamba;
extern const Architecture kNemotronH;
extern const Architecture kFalconH1;
extern const Architecture kLfm2;

const std::vector<const Architecture*>& Architectures() {
  static const std::vector<const Architecture*> all = {
      &kMamba,   &kFalconMamba, &kMamba2,   &kMambaSsm, &kRwkv,   &kLlama,
      &kMistral, &kQwen2,       &kJamba,    &kZamba,    &kZamba2, &kGraniteMoeHybrid,
      &kBamba,   &kNemotronH,   &kFalconH1, &kLfm2};
  return all;
}

const Architecture* FindArchitecture(absl::string_view model_type) {
  for (const Architecture* a : Architectures()) {
    if (model_type == a->model_type) return a;
  }
  return nullptr;
}

}  // namespace attnserve::model::architectures

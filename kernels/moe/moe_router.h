// A mixture-of-experts router: each token's top k experts and their weights, from its router
// logits (one per expert). The families' variants, named in ModelConfig.moe_router:
//   kSoftmaxTopK ("softmax_topk"; Jamba, transformers' JambaSparseMoeBlock): p = softmax over all
//                E logits (float32), the k largest p as they are (they sum to less than 1).
//   kTopKSoftmax ("topk_softmax"; Mixtral renormalised, Granite-4.0-H's
//   GraniteMoeHybridTopKGating):
//                the k largest logits, weights softmax over those k only (they sum to 1).
//   kSigmoidTopK ("sigmoid_topk"; Nemotron-H's NemotronHTopkRouter, DeepSeek-V3's without
//   groups):
//                s = sigmoid of each logit; the k largest s + correction_bias[e] choose the
//                experts; their weights are their s (without the bias), divided by their sum
//                (+ 1e-20) when `normalize`, times `scale`.
// The first two choose the same experts (softmax is monotonic); ties go to the lower expert
// index. A token's choice depends on its own logits only.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace attnserve::kernels {

enum class RouterKind { kSoftmaxTopK, kTopKSoftmax, kSigmoidTopK };

// "" and "softmax_topk": kSoftmaxTopK; "topk_softmax": kTopKSoftmax; "sigmoid_topk":
// kSigmoidTopK; anything else an InvalidArgument naming the accepted values.
absl::StatusOr<RouterKind> ParseRouterKind(absl::string_view name);

// kSigmoidTopK's extras (the others ignore them).
struct RouterOptions {
  const float* correction_bias = nullptr;  // (experts), or null: none
  bool normalize = false;
  float scale = 1.0f;
};

// logits: (tokens, experts) row-major float32. Writes, for token t, its experts into
// ids[t·k .. t·k + k) in descending order of their choosing score and their weights into
// weights[same]. Requires 1 <= k <= experts.
void RouteTokens(const float* logits, int64_t tokens, int64_t experts, int64_t k, RouterKind kind,
                 int32_t* ids, float* weights, const RouterOptions& options = {});

}  // namespace attnserve::kernels

// A mixture-of-experts router: each token's top k experts and their weights, from its router
// logits (one per expert). The families' variants, named in ModelConfig.moe_router:
//   kSoftmaxTopK ("softmax_topk"; Jamba, transformers' JambaSparseMoeBlock): p = softmax over all
//                E logits (float32), the k largest p as they are (they sum to less than 1).
//   kTopKSoftmax ("topk_softmax"; Mixtral renormalised, Granite-4.0-H's
//   GraniteMoeHybridTopKGating):
//                the k largest logits, weights softmax over those k only (they sum to 1).
// Both choose the same experts (softmax is monotonic); ties go to the lower expert index. A
// token's choice depends on its own logits only.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace attnserve::kernels {

enum class RouterKind { kSoftmaxTopK, kTopKSoftmax };

// "" and "softmax_topk": kSoftmaxTopK; "topk_softmax": kTopKSoftmax; anything else an
// InvalidArgument naming the accepted values.
absl::StatusOr<RouterKind> ParseRouterKind(absl::string_view name);

// logits: (tokens, experts) row-major float32. Writes, for token t, its experts into
// ids[t·k .. t·k + k) in descending order of weight and their weights into weights[same].
// Requires 1 <= k <= experts.
void RouteTokens(const float* logits, int64_t tokens, int64_t experts, int64_t k, RouterKind kind,
                 int32_t* ids, float* weights);

}  // namespace attnserve::kernels

#include "kernels/moe/moe_router.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"

namespace attnserve::kernels {

absl::StatusOr<RouterKind> ParseRouterKind(absl::string_view name) {
  if (name.empty() || name == "softmax_topk") return RouterKind::kSoftmaxTopK;
  if (name == "topk_softmax") return RouterKind::kTopKSoftmax;
  if (name == "sigmoid_topk") return RouterKind::kSigmoidTopK;
  return absl::InvalidArgumentError(
      absl::StrCat("moe_router \"", name,
                   "\" is not supported (softmax_topk: Jamba's; topk_softmax: "
                   "Mixtral's and Granite's; sigmoid_topk: Nemotron-H's)"));
}

namespace {

// Token by token: the k largest of `score`, ties to the lower index.
void TopK(const float* score, int64_t experts, int64_t k, std::vector<int32_t>& order) {
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [score](int32_t a, int32_t b) {
    return score[a] > score[b] || (score[a] == score[b] && a < b);
  });
}

}  // namespace

void RouteTokens(const float* logits, int64_t tokens, int64_t experts, int64_t k, RouterKind kind,
                 int32_t* ids, float* weights, const RouterOptions& options) {
  std::vector<int32_t> order(experts);
  std::vector<float> sigmoid(experts), choice(experts);
  for (int64_t t = 0; t < tokens; ++t) {
    const float* row = logits + t * experts;
    if (kind == RouterKind::kSigmoidTopK) {
      for (int64_t e = 0; e < experts; ++e) {
        sigmoid[e] = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(row[e]))));
        choice[e] = sigmoid[e] + (options.correction_bias ? options.correction_bias[e] : 0.0f);
      }
      TopK(choice.data(), experts, k, order);
      double sum = 0;
      for (int64_t j = 0; j < k; ++j) sum += sigmoid[order[j]];
      const double divisor = options.normalize ? sum + 1e-20 : 1.0;
      for (int64_t j = 0; j < k; ++j) {
        ids[t * k + j] = order[j];
        weights[t * k + j] = static_cast<float>(sigmoid[order[j]] / divisor * options.scale);
      }
      continue;
    }
    // The k largest logits.
    TopK(row, experts, k, order);
    const float top = row[order[0]];
    // The softmax's denominator: over all experts, or over the chosen k.
    const int64_t span = kind == RouterKind::kSoftmaxTopK ? experts : k;
    const int32_t* over = kind == RouterKind::kSoftmaxTopK ? nullptr : order.data();
    double sum = 0;
    for (int64_t i = 0; i < span; ++i) {
      sum += std::exp(static_cast<double>((over ? row[over[i]] : row[i]) - top));
    }
    for (int64_t j = 0; j < k; ++j) {
      ids[t * k + j] = order[j];
      weights[t * k + j] =
          static_cast<float>(std::exp(static_cast<double>(row[order[j]] - top)) / sum);
    }
  }
}

}  // namespace attnserve::kernels

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
  return absl::InvalidArgumentError(
      absl::StrCat("moe_router \"", name,
                   "\" is not supported (softmax_topk: Jamba's; topk_softmax: "
                   "Mixtral's and Granite's)"));
}

void RouteTokens(const float* logits, int64_t tokens, int64_t experts, int64_t k, RouterKind kind,
                 int32_t* ids, float* weights) {
  std::vector<int32_t> order(experts);
  for (int64_t t = 0; t < tokens; ++t) {
    const float* row = logits + t * experts;
    std::iota(order.begin(), order.end(), 0);
    // The k largest logits, ties to the lower index (stable over the index order).
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [row](int32_t a, int32_t b) {
      return row[a] > row[b] || (row[a] == row[b] && a < b);
    });
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

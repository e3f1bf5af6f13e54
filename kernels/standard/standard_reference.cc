#include "kernels/standard/standard_reference.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "kernels/common/status_macros.h"
#include "kernels/common/tensor_checks.h"

namespace attnserve::kernels {
namespace {

absl::Status CheckWeight(const WeightMap& weights, const char* name, int64_t d_model) {
  auto it = weights.find(name);
  if (it == weights.end()) return absl::InvalidArgumentError(absl::StrCat("missing ", name));
  if (it->second.sizes() != at::IntArrayRef({d_model, d_model})) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": expected (", d_model, ", ", d_model,
                                                   "), got ", ShapeString(it->second.sizes())));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<at::Tensor> NaiveAttentionReference(const at::Tensor& q, const at::Tensor& k,
                                                   const at::Tensor& v, bool causal) {
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4 || k.sizes() != v.sizes() ||
      q.size(3) != k.size(3) || (causal && k.size(2) < q.size(2))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NaiveAttentionReference: expected q (B, H, Lq, d), k and v (B, H, Lk >= Lq, d), got ",
        ShapeString(q.sizes()), ", ", ShapeString(k.sizes()), ", ", ShapeString(v.sizes())));
  }
  return GuardTorch("NaiveAttentionReference", [&]() -> absl::StatusOr<at::Tensor> {
    const int64_t lq = q.size(2), lk = k.size(2), d = q.size(3);
    at::Tensor scores = at::matmul(q.to(at::kDouble), k.to(at::kDouble).transpose(-1, -2)) /
                        std::sqrt(static_cast<double>(d));  // (B, H, Lq, Lk)
    if (causal) {
      // hidden[i][j]: key j is after query i's position Lk - Lq + i.
      at::Tensor hidden = at::ones({lq, lk}, at::kBool).triu(lk - lq + 1);
      scores = scores.masked_fill(hidden, -std::numeric_limits<double>::infinity());
    }
    return at::matmul(at::softmax(scores, -1), v.to(at::kDouble));
  });
}

absl::StatusOr<std::tuple<at::Tensor, at::Tensor, at::Tensor>> ReferenceProjectQkv(
    const WeightMap& weights, const at::Tensor& x, int64_t num_heads) {
  if (x.dim() != 3 || num_heads <= 0 || x.size(2) % num_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("reference: expected x (B, L, D) with D a "
                     "multiple of num_heads, got x ",
                     ShapeString(x.sizes()), ", num_heads ", num_heads));
  }
  const int64_t d_model = x.size(2);
  for (const char* name : {"q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight"}) {
    RETURN_IF_ERROR(CheckWeight(weights, name, d_model));
  }
  return GuardTorch("ReferenceProjectQkv",
                    [&]() -> absl::StatusOr<std::tuple<at::Tensor, at::Tensor, at::Tensor>> {
                      const int64_t b = x.size(0), l = x.size(1), d = d_model / num_heads;
                      const at::Tensor xd = x.to(at::kDouble);
                      auto heads = [&](const char* name) {
                        // y = x Wᵀ, then (B, L, H, d) -> (B, H, L, d).
                        return at::matmul(xd, weights.at(name).to(at::kDouble).t())
                            .view({b, l, num_heads, d})
                            .permute({0, 2, 1, 3});
                      };
                      return std::make_tuple(heads("q_proj.weight"), heads("k_proj.weight"),
                                             heads("v_proj.weight"));
                    });
}

at::Tensor ReferenceProjectOutput(const WeightMap& weights, const at::Tensor& heads) {
  const int64_t b = heads.size(0), h = heads.size(1), l = heads.size(2), d = heads.size(3);
  const at::Tensor concat = heads.to(at::kDouble).permute({0, 2, 1, 3}).reshape({b, l, h * d});
  return at::matmul(concat, weights.at("o_proj.weight").to(at::kDouble).t());
}

absl::StatusOr<at::Tensor> StandardAttentionReference(const WeightMap& weights, const at::Tensor& x,
                                                      int64_t num_heads, bool causal) {
  ASSIGN_OR_RETURN(auto qkv, ReferenceProjectQkv(weights, x, num_heads));
  auto [q, k, v] = qkv;
  ASSIGN_OR_RETURN(at::Tensor heads, NaiveAttentionReference(q, k, v, causal));
  return GuardTorch("StandardAttentionReference", [&]() -> absl::StatusOr<at::Tensor> {
    return ReferenceProjectOutput(weights, heads);
  });
}

}  // namespace attnserve::kernels

#include "kernels/standard/trained_attention_reference.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "kernels/common/tensor_checks.h"

namespace attnserve::kernels {
namespace {

// y = x Wᵀ (+ b) of the named projection, float64.
at::Tensor Project(const WeightMap& w, const std::string& name, const at::Tensor& x) {
  at::Tensor y = at::matmul(x, w.at(name + ".weight").to(at::kDouble).t());
  auto bias = w.find(name + ".bias");
  return bias == w.end() ? y : y + bias->second.to(at::kDouble);
}

// (B, L, H·d) -> (B, H, L, d).
at::Tensor Heads(const at::Tensor& y, int64_t heads, int64_t d) {
  return y.view({y.size(0), y.size(1), heads, d}).permute({0, 2, 1, 3});
}

// x (B, H, L, d) rotated: the first `dim` dims in halves, token t at position t.
at::Tensor Rotate(const at::Tensor& x, double theta, int64_t dim) {
  const int64_t l = x.size(2), half = dim / 2;
  at::Tensor cos = at::empty({l, half}, at::kDouble), sin = at::empty({l, half}, at::kDouble);
  for (int64_t t = 0; t < l; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = t / std::pow(theta, 2.0 * i / dim);
      cos[t][i] = std::cos(angle);
      sin[t][i] = std::sin(angle);
    }
  }
  const at::Tensor x1 = x.narrow(3, 0, half), x2 = x.narrow(3, half, half);
  return at::cat({x1 * cos - x2 * sin, x2 * cos + x1 * sin, x.narrow(3, dim, x.size(3) - dim)}, 3);
}

}  // namespace

absl::StatusOr<at::Tensor> TrainedAttentionReference(const MixerConfig& c, const WeightMap& weights,
                                                     const at::Tensor& x) {
  if (c.rope.enabled() && c.rope.type != "default") {
    return absl::InvalidArgumentError(
        absl::StrCat("reference: rotary positions of type default only, got ", c.rope.type));
  }
  return GuardTorch("TrainedAttentionReference", [&]() -> absl::StatusOr<at::Tensor> {
    const int64_t h = c.num_heads, hkv = c.kv_heads(), d = c.head_dim(), l = x.size(1);
    const at::Tensor xd = x.to(at::kDouble);
    at::Tensor q = Heads(Project(weights, "q_proj", xd), h, d);
    at::Tensor k = Heads(Project(weights, "k_proj", xd), hkv, d);
    at::Tensor v = Heads(Project(weights, "v_proj", xd), hkv, d);
    if (c.qk_norm) {  // each head's q and k: x / sqrt(mean(x²) + eps) · weight
      const auto norm = [&](const at::Tensor& t, const char* name) {
        return t * at::rsqrt(t.pow(2).mean(-1, /*keepdim=*/true) + c.norm_epsilon) *
               weights.at(name).to(at::kDouble);
      };
      q = norm(q, "q_norm.weight");
      k = norm(k, "k_norm.weight");
    }
    if (c.rope.enabled()) {
      const int64_t dim = c.rope.rotary_dim > 0 ? c.rope.rotary_dim : d;
      q = Rotate(q, c.rope.theta, dim);
      k = Rotate(k, c.rope.theta, dim);
    }
    k = k.repeat_interleave(h / hkv, 1);
    v = v.repeat_interleave(h / hkv, 1);
    const double scale =
        c.attention_scale > 0 ? c.attention_scale : 1.0 / std::sqrt(static_cast<double>(d));
    at::Tensor scores = at::matmul(q, k.transpose(2, 3)) * scale;
    // Query i sees keys j with j <= i and, with a window W, i - j < W.
    const at::Tensor i = at::arange(l, at::kLong).unsqueeze(1), j = at::arange(l, at::kLong);
    at::Tensor hidden = j > i;
    if (c.attention_window > 0) hidden = hidden.logical_or(i - j >= c.attention_window);
    scores = scores.masked_fill(hidden, -std::numeric_limits<double>::infinity());
    const at::Tensor heads = at::matmul(at::softmax(scores, -1), v);
    const at::Tensor concat = heads.permute({0, 2, 1, 3}).reshape({x.size(0), l, h * d});
    return Project(weights, "o_proj", concat);
  });
}

}  // namespace attnserve::kernels

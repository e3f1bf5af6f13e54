#include "kernels/rwkv/rwkv_reference.h"

#include <ATen/ATen.h>

#include "kernels/common/tensor_checks.h"

namespace attnserve::kernels {
namespace {

at::Tensor D(const WeightMap& w, const char* name) { return w.at(name).to(at::kDouble); }

// y = x Wᵀ in float64.
at::Tensor Project(const at::Tensor& x, const WeightMap& w, const char* name) {
  return at::matmul(x, D(w, name).t());
}

// LayerNorm over the last dimension, from its definition (biased variance).
at::Tensor LayerNormRef(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                        double eps) {
  const at::Tensor mean = x.mean(-1, /*keepdim=*/true);
  const at::Tensor var = (x - mean).pow(2).mean(-1, /*keepdim=*/true);
  return (x - mean) / at::sqrt(var + eps) * weight + bias;
}

// x (B, L, H) with row t replaced by row t-1, row 0 by zeros (a fresh state).
at::Tensor ShiftRef(const at::Tensor& x) {
  at::Tensor s = at::zeros_like(x);
  if (x.size(1) > 1) s.narrow(1, 1, x.size(1) - 1).copy_(x.narrow(1, 0, x.size(1) - 1));
  return s;
}

at::Tensor MixRef(const at::Tensor& x, const at::Tensor& shifted, const at::Tensor& mu) {
  return x * mu + shifted * (1 - mu);
}

}  // namespace

at::Tensor WkvReference(const at::Tensor& time_decay, const at::Tensor& time_first,
                        const at::Tensor& k, const at::Tensor& v) {
  const at::Tensor kd = k.to(at::kDouble), vd = v.to(at::kDouble);
  const at::Tensor w = at::exp(time_decay.to(at::kDouble));  // decay per step, > 0
  const at::Tensor u = time_first.to(at::kDouble);
  const int64_t len = k.size(1);
  at::Tensor out = at::empty_like(kd);
  for (int64_t t = 0; t < len; ++t) {
    const at::Tensor now = at::exp(u + kd.select(1, t));
    at::Tensor num = now * vd.select(1, t), den = now.clone();
    for (int64_t i = 0; i < t; ++i) {
      const at::Tensor weight = at::exp(-static_cast<double>(t - 1 - i) * w + kd.select(1, i));
      num = num + weight * vd.select(1, i);
      den = den + weight;
    }
    out.select(1, t).copy_(num / den);
  }
  return out;
}

absl::StatusOr<at::Tensor> RwkvBlockReference(const MixerConfig& config, const WeightMap& w,
                                              const at::Tensor& x) {
  return GuardTorch("RwkvBlockReference", [&]() -> absl::StatusOr<at::Tensor> {
    const int64_t h = config.d_model;
    const double eps = config.norm_epsilon;
    auto mu = [&](const char* name) { return D(w, name).view({h}); };
    const at::Tensor xd = x.to(at::kDouble);
    const at::Tensor xa = LayerNormRef(xd, D(w, "ln1.weight"), D(w, "ln1.bias"), eps);
    const at::Tensor xs = ShiftRef(xa);
    const at::Tensor k =
        Project(MixRef(xa, xs, mu("attention.time_mix_key")), w, "attention.key.weight");
    const at::Tensor v =
        Project(MixRef(xa, xs, mu("attention.time_mix_value")), w, "attention.value.weight");
    const at::Tensor r = at::sigmoid(Project(MixRef(xa, xs, mu("attention.time_mix_receptance")), w,
                                             "attention.receptance.weight"));
    const at::Tensor wkv =
        WkvReference(w.at("attention.time_decay"), w.at("attention.time_first"), k, v);
    const at::Tensor att = Project(r * wkv, w, "attention.output.weight");
    const at::Tensor hidden = xd + att;
    const at::Tensor xf = LayerNormRef(hidden, D(w, "ln2.weight"), D(w, "ln2.bias"), eps);
    const at::Tensor xg = ShiftRef(xf);
    const at::Tensor kk = at::relu(Project(MixRef(xf, xg, mu("feed_forward.time_mix_key")), w,
                                           "feed_forward.key.weight"))
                              .pow(2);
    const at::Tensor rr =
        at::sigmoid(Project(MixRef(xf, xg, mu("feed_forward.time_mix_receptance")), w,
                            "feed_forward.receptance.weight"));
    const at::Tensor ffn = rr * Project(kk, w, "feed_forward.value.weight");
    return hidden + ffn - xd;
  });
}

}  // namespace attnserve::kernels

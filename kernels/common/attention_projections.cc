#include "kernels/common/attention_projections.h"

#include <ATen/ATen.h>

#include <cmath>

#include "kernels/common/linear.h"

namespace attnserve::kernels {
namespace {
constexpr const char* kNames[] = {"q_proj.weight", "k_proj.weight", "v_proj.weight",
                                  "o_proj.weight"};
}  // namespace

std::vector<WeightSpec> AttentionProjectionSpecs(const MixerConfig& config) {
  std::vector<WeightSpec> specs;
  for (const char* name : kNames) specs.push_back({name, {config.d_model, config.d_model}});
  return specs;
}

void AddRandomAttentionProjections(const MixerConfig& config, at::Generator& gen,
                                   WeightMap* weights) {
  const double std = 1.0 / std::sqrt(static_cast<double>(config.d_model));
  for (const char* name : kNames) {
    (*weights)[name] = at::normal(0.0, std, {config.d_model, config.d_model}, gen);
  }
}

AttentionProjections AttentionProjections::FromWeights(const WeightMap& weights,
                                                       WeightFormat format) {
  AttentionProjections p;
  p.qkv = LinearWeight(at::cat({weights.at("q_proj.weight"), weights.at("k_proj.weight"),
                                weights.at("v_proj.weight")},
                               0),
                       format);
  p.o = LinearWeight(weights.at("o_proj.weight"), format);
  return p;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> AttentionProjections::ProjectQkv(
    const at::Tensor& x, int64_t num_heads) const {
  const int64_t b = x.size(0), l = x.size(1), d_model = x.size(2);
  const int64_t head_dim = d_model / num_heads;
  // One matmul for the three projections, then split into heads.
  at::Tensor y = qkv(x);  // (B, L, 3D)
  y = y.view({b, l, 3, num_heads, head_dim}).permute({2, 0, 3, 1, 4});
  return {y[0].contiguous(), y[1].contiguous(), y[2].contiguous()};
}

at::Tensor AttentionProjections::ProjectOutput(const at::Tensor& heads) const {
  const int64_t b = heads.size(0), h = heads.size(1), l = heads.size(2), d = heads.size(3);
  return o(heads.permute({0, 2, 1, 3}).reshape({b, l, h * d}));
}

}  // namespace attnserve::kernels

#include "kernels/common/attention_projections.h"

#include <ATen/ATen.h>

#include <cmath>

#include "kernels/common/linear.h"
#include "kernels/common/rms_norm.h"

namespace attnserve::kernels {

std::vector<WeightSpec> AttentionProjectionSpecs(const MixerConfig& config) {
  const int64_t q_width = config.num_heads * config.head_dim();
  const int64_t kv_width = config.kv_heads() * config.head_dim();
  std::vector<WeightSpec> specs = {{"q_proj.weight", {q_width, config.d_model}},
                                   {"k_proj.weight", {kv_width, config.d_model}},
                                   {"v_proj.weight", {kv_width, config.d_model}},
                                   {"o_proj.weight", {config.output_dim(), q_width}}};
  if (config.qkv_bias) {
    specs.push_back({"q_proj.bias", {q_width}});
    specs.push_back({"k_proj.bias", {kv_width}});
    specs.push_back({"v_proj.bias", {kv_width}});
  }
  if (config.o_bias) specs.push_back({"o_proj.bias", {config.output_dim()}});
  if (config.qk_norm) {
    specs.push_back({"q_norm.weight", {config.head_dim()}});
    specs.push_back({"k_norm.weight", {config.head_dim()}});
  }
  return specs;
}

void AddRandomAttentionProjections(const MixerConfig& config, at::Generator& gen,
                                   WeightMap* weights) {
  for (const WeightSpec& spec : AttentionProjectionSpecs(config)) {
    // A weight (out, in) ~ Normal(0, 1/sqrt(in)); a bias ~ Normal(0, 0.02); a norm's weight
    // ~ Normal(1, 0.1).
    const bool norm = spec.name == "q_norm.weight" || spec.name == "k_norm.weight";
    const double std = spec.shape.size() == 2 ? 1.0 / std::sqrt(static_cast<double>(spec.shape[1]))
                       : norm                 ? 0.1
                                              : 0.02;
    (*weights)[spec.name] = at::normal(norm ? 1.0 : 0.0, std, spec.shape, gen);
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
  if (weights.count("q_proj.bias")) {
    p.qkv_bias = at::cat(
        {weights.at("q_proj.bias"), weights.at("k_proj.bias"), weights.at("v_proj.bias")}, 0);
  }
  if (weights.count("o_proj.bias")) p.o_bias = weights.at("o_proj.bias").contiguous();
  if (weights.count("q_norm.weight")) {
    p.q_norm = weights.at("q_norm.weight").contiguous();
    p.k_norm = weights.at("k_norm.weight").contiguous();
  }
  return p;
}

double AttentionProjections::QueryFactor(const MixerConfig& config) {
  if (!(config.attention_scale > 0)) return 1.0;
  return config.attention_scale * std::sqrt(static_cast<double>(config.head_dim()));
}

AttentionProjections AttentionProjections::FromConfig(const MixerConfig& config,
                                                      const WeightMap& weights) {
  if (config.attention_scale > 0 && config.qk_norm) {
    // Normed queries: the factor goes into q_norm's weight (after the norm) instead.
    WeightMap scaled = weights;
    scaled["q_norm.weight"] = weights.at("q_norm.weight") * QueryFactor(config);
    AttentionProjections p = FromWeights(scaled, config.weight_format);
    p.kv_heads = config.kv_heads();
    p.head_dim = config.head_dim();
    p.qk_norm_epsilon = config.norm_epsilon;
    return p;
  }
  if (config.attention_scale > 0) {
    // softmax(s · q·k) = softmax(d^-1/2 · (s·√d · q)·k): q_proj's rows (and bias) scaled, the
    // kernels' own d^-1/2 kept.
    const double factor = QueryFactor(config);
    WeightMap scaled = weights;
    scaled["q_proj.weight"] = weights.at("q_proj.weight") * factor;
    if (IsBfloat16(config.weight_format)) {  // the panels take bfloat16-exact values
      scaled["q_proj.weight"] = scaled["q_proj.weight"].to(at::kBFloat16).to(at::kFloat);
    }
    if (weights.count("q_proj.bias")) scaled["q_proj.bias"] = weights.at("q_proj.bias") * factor;
    AttentionProjections p = FromWeights(scaled, config.weight_format);
    p.kv_heads = config.kv_heads();
    p.head_dim = config.head_dim();
    return p;
  }
  AttentionProjections p = FromWeights(weights, config.weight_format);
  p.kv_heads = config.kv_heads();
  p.head_dim = config.head_dim();
  p.qk_norm_epsilon = config.norm_epsilon;
  return p;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> AttentionProjections::ProjectQkv(
    const at::Tensor& x, int64_t num_heads) const {
  const int64_t b = x.size(0), l = x.size(1), d_model = x.size(2);
  const int64_t d = head_dim > 0 ? head_dim : d_model / num_heads;
  const int64_t groups = kv_heads > 0 ? kv_heads : num_heads;
  // One matmul for the three projections, then split into heads.
  at::Tensor y = qkv(x);  // (B, L, (H + 2 Hkv) d)
  if (qkv_bias.defined()) y.add_(qkv_bias);
  if (qkv_adapter.defined()) qkv_adapter.AddTo(x, y);
  if (q_norm.defined()) {  // each head's q and k normed in place, before the heads are split
    const auto norm = [&](int64_t from, int64_t count, const at::Tensor& weight) {
      at::Tensor part = y.narrow(2, from * d, count * d);
      part.copy_(RmsNorm(part.reshape({b, l, count, d}).contiguous(), weight, qk_norm_epsilon)
                     .view({b, l, count * d}));
    };
    norm(0, num_heads, q_norm);
    norm(num_heads, groups, k_norm);
  }
  if (groups == num_heads) {
    y = y.view({b, l, 3, num_heads, d}).permute({2, 0, 3, 1, 4});
    return {y[0].contiguous(), y[1].contiguous(), y[2].contiguous()};
  }
  const auto heads = [&](int64_t from, int64_t count) {
    return y.narrow(2, from * d, count * d)
        .view({b, l, count, d})
        .permute({0, 2, 1, 3})
        .contiguous();
  };
  return {heads(0, num_heads), heads(num_heads, groups), heads(num_heads + groups, groups)};
}

at::Tensor AttentionProjections::ProjectOutput(const at::Tensor& heads) const {
  const int64_t b = heads.size(0), h = heads.size(1), l = heads.size(2), d = heads.size(3);
  at::Tensor y = o(heads.permute({0, 2, 1, 3}).reshape({b, l, h * d}));
  if (o_bias.defined()) y.add_(o_bias);
  return y;
}

}  // namespace attnserve::kernels

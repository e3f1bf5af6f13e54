#include "kernels/moe/moe_mlp.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include "absl/strings/str_cat.h"

namespace attnserve::kernels {
namespace {

std::string ExpertName(int64_t e, const char* proj) {
  return absl::StrCat("experts.", e, ".", proj, ".weight");
}

}  // namespace

MoeMlp::MoeMlp(const MoeConfig& config, const WeightMap& w, WeightFormat format)
    : config_(config), router_(w.at("router.weight"), WeightFormat::kFloat32) {
  for (int64_t e = 0; e < config.num_experts; ++e) {
    experts_.emplace_back(w.at(ExpertName(e, "gate_proj")), w.at(ExpertName(e, "up_proj")),
                          w.at(ExpertName(e, "down_proj")), format, config.act);
  }
}

std::vector<WeightSpec> MoeMlp::ExpectedWeights(const MoeConfig& c) {
  std::vector<WeightSpec> specs = {{"router.weight", {c.num_experts, c.d_model}}};
  for (int64_t e = 0; e < c.num_experts; ++e) {
    specs.push_back({ExpertName(e, "gate_proj"), {c.d_ff, c.d_model}});
    specs.push_back({ExpertName(e, "up_proj"), {c.d_ff, c.d_model}});
    specs.push_back({ExpertName(e, "down_proj"), {c.d_model, c.d_ff}});
  }
  return specs;
}

WeightMap MoeMlp::RandomWeights(const MoeConfig& c, uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  WeightMap w;
  const double in_std = 1.0 / std::sqrt(static_cast<double>(c.d_model));
  w["router.weight"] = at::normal(0.0, in_std, {c.num_experts, c.d_model}, gen);
  for (int64_t e = 0; e < c.num_experts; ++e) {
    AddRandomGatedMlpWeights(absl::StrCat("experts.", e, "."), c.d_model, c.d_ff, gen, &w);
  }
  return w;
}

int64_t MoeMlp::Bytes() const {
  int64_t bytes = router_.Bytes();
  for (const GatedMlp& expert : experts_) bytes += expert.Bytes();
  return bytes;
}

at::Tensor MoeMlp::operator()(const at::Tensor& x) const {
  const int64_t d = config_.d_model, k = config_.top_k, n_experts = config_.num_experts;
  const at::Tensor rows = x.reshape({-1, d}).contiguous();
  const int64_t tokens = rows.size(0);
  // The routing, on the CPU: (tokens, E) logits are a few hundred bytes a token.
  const at::Tensor logits = router_(rows).to(at::kCPU).contiguous();
  std::vector<int32_t> ids(tokens * k);
  std::vector<float> weights(tokens * k);
  RouteTokens(logits.data_ptr<float>(), tokens, n_experts, k, config_.router, ids.data(),
              weights.data());
  // Each expert's tokens, in token order, and their weights.
  std::vector<std::vector<int64_t>> expert_tokens(n_experts);
  std::vector<std::vector<float>> expert_weights(n_experts);
  for (int64_t s = 0; s < tokens * k; ++s) {
    expert_tokens[ids[s]].push_back(s / k);
    expert_weights[ids[s]].push_back(weights[s]);
  }
  // out[t] accumulates its experts' weighted outputs in the order of the experts' indices (as
  // transformers' index_add_ loop does): the same order for a token alone or in any batch.
  at::Tensor out = at::zeros_like(rows);
  for (int64_t e = 0; e < n_experts; ++e) {
    const std::vector<int64_t>& chosen = expert_tokens[e];
    if (chosen.empty()) continue;
    const at::Tensor index = at::from_blob(const_cast<int64_t*>(chosen.data()),
                                           {static_cast<int64_t>(chosen.size())}, at::kLong)
                                 .to(rows.device());
    const at::Tensor scale = at::from_blob(expert_weights[e].data(),
                                           {static_cast<int64_t>(chosen.size()), 1}, at::kFloat)
                                 .to(rows.device());
    at::Tensor y = experts_[e](rows.index_select(0, index));
    out.index_add_(0, index, y.mul_(scale));
  }
  return out.view(x.sizes());
}

}  // namespace attnserve::kernels

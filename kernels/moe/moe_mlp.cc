#include "kernels/moe/moe_mlp.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include "absl/strings/str_cat.h"

namespace attnserve::kernels {
namespace {

std::string ExpertPrefix(int64_t e) { return absl::StrCat("experts.", e, "."); }
constexpr char kShared[] = "shared_expert.";

// An MLP's weights under `prefix`: gate_proj (if gated), up_proj, down_proj.
void AddMlpSpecs(const std::string& prefix, int64_t d_model, int64_t d_ff, bool gated,
                 std::vector<WeightSpec>* specs) {
  if (gated) specs->push_back({prefix + "gate_proj.weight", {d_ff, d_model}});
  specs->push_back({prefix + "up_proj.weight", {d_ff, d_model}});
  specs->push_back({prefix + "down_proj.weight", {d_model, d_ff}});
}

GatedMlp MlpOf(const WeightMap& w, const std::string& prefix, bool gated, WeightFormat format,
               MlpActivation act) {
  return GatedMlp(gated ? w.at(prefix + "gate_proj.weight") : at::Tensor(),
                  w.at(prefix + "up_proj.weight"), w.at(prefix + "down_proj.weight"), format, act);
}

}  // namespace

MoeMlp::MoeMlp(const MoeConfig& config, const WeightMap& w, WeightFormat format)
    : config_(config), router_(w.at("router.weight"), WeightFormat::kFloat32) {
  if (config.router == RouterKind::kSigmoidTopK) {
    correction_bias_ = w.at("router.correction_bias").to(at::kCPU).contiguous();
  }
  for (int64_t e = 0; e < config.num_experts; ++e) {
    experts_.push_back(MlpOf(w, ExpertPrefix(e), config.gated, format, config.act));
  }
  if (config.shared_d_ff > 0) shared_ = MlpOf(w, kShared, config.gated, format, config.act);
}

std::vector<WeightSpec> MoeMlp::ExpectedWeights(const MoeConfig& c) {
  std::vector<WeightSpec> specs = {{"router.weight", {c.num_experts, c.d_model}}};
  if (c.router == RouterKind::kSigmoidTopK) {
    specs.push_back({"router.correction_bias", {c.num_experts}});
  }
  for (int64_t e = 0; e < c.num_experts; ++e) {
    AddMlpSpecs(ExpertPrefix(e), c.d_model, c.d_ff, c.gated, &specs);
  }
  if (c.shared_d_ff > 0) AddMlpSpecs(kShared, c.d_model, c.shared_d_ff, c.gated, &specs);
  return specs;
}

WeightMap MoeMlp::RandomWeights(const MoeConfig& c, uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  WeightMap w;
  const double in_std = 1.0 / std::sqrt(static_cast<double>(c.d_model));
  w["router.weight"] = at::normal(0.0, in_std, {c.num_experts, c.d_model}, gen);
  if (c.router == RouterKind::kSigmoidTopK) {
    // As large as the sigmoid scores' spread: the bias moves some choices.
    w["router.correction_bias"] = at::normal(0.0, 0.1, {c.num_experts}, gen);
  }
  for (int64_t e = 0; e < c.num_experts; ++e) {
    AddRandomGatedMlpWeights(ExpertPrefix(e), c.d_model, c.d_ff, gen, &w, c.gated);
  }
  if (c.shared_d_ff > 0) {
    AddRandomGatedMlpWeights(kShared, c.d_model, c.shared_d_ff, gen, &w, c.gated);
  }
  return w;
}

int64_t MoeMlp::Bytes() const {
  int64_t bytes = router_.Bytes();
  for (const GatedMlp& expert : experts_) bytes += expert.Bytes();
  if (shared_.defined()) bytes += shared_.Bytes();
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
  RouterOptions options;
  if (correction_bias_.defined()) options.correction_bias = correction_bias_.data_ptr<float>();
  options.normalize = config_.normalize;
  options.scale = static_cast<float>(config_.scaling);
  RouteTokens(logits.data_ptr<float>(), tokens, n_experts, k, config_.router, ids.data(),
              weights.data(), options);
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
  if (shared_.defined()) out.add_(shared_(rows));
  return out.view(x.sizes());
}

}  // namespace attnserve::kernels

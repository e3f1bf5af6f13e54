#include "server/model/shared_block.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/common/rms_norm.h"
#include "kernels/common/status_macros.h"

namespace attnserve::model {
namespace {

constexpr char kPrefix[] = "backbone.shared.";

std::string Name(const std::string& rest) { return kPrefix + rest; }

}  // namespace

bool UsesSharedBlock(const v1::ModelConfig& c) {
  for (bool used : c.shared_block_layers()) {
    if (used) return true;
  }
  return false;
}

bool LayerUsesSharedBlock(const v1::ModelConfig& c, int layer) {
  return layer < c.shared_block_layers_size() && c.shared_block_layers(layer);
}

kernels::MixerConfig SharedBlock::AttentionConfig(const v1::ModelConfig& c) {
  kernels::MixerConfig m;
  m.kind = kernels::MixerKind::kStandard;
  m.d_model = 2 * c.hidden_size();
  m.out_dim = c.hidden_size();
  m.num_heads = c.num_heads();
  m.num_kv_heads = c.num_key_value_heads();
  m.attention_head_dim = c.head_dim();
  m.attention_scale = c.attention_scale();
  m.norm_epsilon = c.norm_epsilon();
  return m;
}

std::vector<kernels::WeightSpec> SharedBlock::ExpectedTensors(const v1::ModelConfig& c) {
  const int64_t hidden = c.hidden_size(), mlp = c.intermediate_size();
  std::vector<kernels::WeightSpec> specs = {{Name("norm.weight"), {2 * hidden}}};
  for (kernels::WeightSpec spec : kernels::ExpectedWeights(AttentionConfig(c))) {
    spec.name = Name("mixer." + spec.name);
    specs.push_back(std::move(spec));
  }
  specs.push_back({Name("mlp_norm.weight"), {hidden}});
  specs.push_back({Name("mlp.gate_proj.weight"), {mlp, hidden}});
  specs.push_back({Name("mlp.up_proj.weight"), {mlp, hidden}});
  specs.push_back({Name("mlp.down_proj.weight"), {hidden, mlp}});
  return specs;
}

void SharedBlock::AddRandomWeights(const v1::ModelConfig& c, uint64_t seed,
                                   std::map<std::string, at::Tensor>* w) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const int64_t hidden = c.hidden_size(), mlp = c.intermediate_size();
  (*w)[Name("norm.weight")] = at::ones({2 * hidden});
  (*w)[Name("mlp_norm.weight")] = at::ones({hidden});
  for (auto& [name, t] : kernels::RandomWeights(AttentionConfig(c), seed)) {
    (*w)[Name("mixer." + name)] = t;
  }
  kernels::AddRandomGatedMlpWeights(Name("mlp."), hidden, mlp, gen, w);
}

absl::StatusOr<std::unique_ptr<SharedBlock>> SharedBlock::Create(
    const v1::ModelConfig& c, const std::map<std::string, at::Tensor>& weights,
    kernels::WeightFormat format, at::ScalarType kv_cache_dtype) {
  auto w = [&](const std::string& rest) { return weights.at(Name(rest)).contiguous(); };
  std::unique_ptr<SharedBlock> block(new SharedBlock());
  block->norm_ = w("norm.weight");
  block->mlp_norm_ = w("mlp_norm.weight");
  block->epsilon_ = c.norm_epsilon();
  kernels::MixerConfig attention = AttentionConfig(c);
  attention.weight_format = format;
  attention.kv_cache_dtype = kv_cache_dtype;
  kernels::WeightMap attention_weights;
  for (const kernels::WeightSpec& spec : kernels::ExpectedWeights(attention)) {
    attention_weights[spec.name] = w("mixer." + spec.name);
  }
  absl::StatusOr<std::unique_ptr<kernels::Mixer>> mixer =
      kernels::CreateMixer(attention, std::move(attention_weights));
  if (!mixer.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the shared block's attention: ", mixer.status().message()));
  }
  block->attention_ = *std::move(mixer);
  block->mlp_ = kernels::GatedMlp(w("mlp.gate_proj.weight"), w("mlp.up_proj.weight"),
                                  w("mlp.down_proj.weight"), format,
                                  kernels::ParseMlpActivation(c.hidden_act()));
  return block;
}

at::Tensor SharedBlock::Input(const at::Tensor& x, const at::Tensor& x0) const {
  return kernels::RmsNorm(at::cat({x, x0}, -1), norm_, epsilon_);
}

at::Tensor SharedBlock::Output(const at::Tensor& attended) const {
  return mlp_(kernels::RmsNorm(attended.contiguous(), mlp_norm_, epsilon_));
}

absl::StatusOr<at::Tensor> SharedBlock::Prefill(const at::Tensor& x, const at::Tensor& x0,
                                                kernels::MixerState* state) const {
  ASSIGN_OR_RETURN(const at::Tensor attended, attention_->Prefill(Input(x, x0), state));
  return Output(attended);
}

absl::StatusOr<at::Tensor> SharedBlock::StepBatch(
    const at::Tensor& x, const at::Tensor& x0,
    const std::vector<kernels::MixerState*>& states) const {
  ASSIGN_OR_RETURN(const at::Tensor attended, attention_->StepBatch(Input(x, x0), states));
  return Output(attended);
}

}  // namespace attnserve::model

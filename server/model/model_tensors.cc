// Model's checkpoint layout (model.h): the tensors a config is made of, and random ones.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include "absl/strings/str_cat.h"
#include "server/model/layer_layout.h"
#include "server/model/model.h"
#include "server/model/model_config.h"
#include "server/model/shared_block.h"

namespace attnserve::model {

using kernels::WeightSpec;

std::vector<WeightSpec> Model::ExpectedTensors(const v1::ModelConfig& c) {
  const int64_t hidden = c.hidden_size(), mlp = c.intermediate_size();
  std::vector<WeightSpec> specs = {{"backbone.embeddings.weight", {c.vocab_size(), hidden}}};
  auto norm = [&](const std::string& name) {
    specs.push_back({name + ".weight", {hidden}});
    if (UsesLayerNorm(c)) specs.push_back({name + ".bias", {hidden}});
  };
  auto mixer = [&](const std::string& prefix, const kernels::MixerConfig& config) {
    for (WeightSpec spec : kernels::ExpectedWeights(config)) {
      spec.name = prefix + spec.name;
      specs.push_back(std::move(spec));
    }
  };
  if (c.embedding_norm()) norm("backbone.embeddings_norm");
  for (int i = 0; i < c.layers_size(); ++i) {
    const std::string prefix = LayerPrefix(i);
    const kernels::MixerConfig config = LayerMixerConfig(c, i);
    if (HasOwnNorm(config.kind)) norm(prefix + "norm");
    mixer(prefix + "mixer.", config);
    if (LayerHasParallelMixer(c, i)) mixer(prefix + "parallel_mixer.", ParallelMixerConfig(c, i));
    if (LayerUsesSharedBlock(c, i))
      specs.push_back({prefix + "shared_linear.weight", {hidden, hidden}});
    if (LayerHasExperts(c, i)) {
      norm(prefix + "mlp_norm");
      for (WeightSpec spec : kernels::MoeMlp::ExpectedWeights(LayerMoeConfig(c))) {
        spec.name = prefix + "mlp." + spec.name;
        specs.push_back(std::move(spec));
      }
    } else if (LayerHasMlp(c, i)) {
      norm(prefix + "mlp_norm");
      if (!c.plain_mlp()) specs.push_back({prefix + "mlp.gate_proj.weight", {mlp, hidden}});
      specs.push_back({prefix + "mlp.up_proj.weight", {mlp, hidden}});
      specs.push_back({prefix + "mlp.down_proj.weight", {hidden, mlp}});
      if (c.mlp_bias()) {
        if (!c.plain_mlp()) specs.push_back({prefix + "mlp.gate_proj.bias", {mlp}});
        specs.push_back({prefix + "mlp.up_proj.bias", {mlp}});
        specs.push_back({prefix + "mlp.down_proj.bias", {hidden}});
      }
    }
  }
  if (UsesSharedBlock(c)) {
    for (WeightSpec spec : SharedBlock::ExpectedTensors(c)) specs.push_back(std::move(spec));
  }
  norm("backbone.norm_f");
  if (!c.tie_word_embeddings()) specs.push_back({"lm_head.weight", {c.vocab_size(), hidden}});
  return specs;
}

std::map<std::string, at::Tensor> Model::RandomWeights(const v1::ModelConfig& c, uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::map<std::string, at::Tensor> w;
  const int64_t hidden = c.hidden_size();
  const int64_t mlp = c.intermediate_size();
  // std 0.02 as Hugging Face initialises embeddings: a tied lm_head then gives spread-out
  // next-token distributions rather than echoing the input token.
  w["backbone.embeddings.weight"] = at::normal(0.0, 0.02, {c.vocab_size(), hidden}, gen);
  auto norm = [&](const std::string& name) {
    w[name + ".weight"] = at::ones({hidden});
    if (UsesLayerNorm(c)) w[name + ".bias"] = at::zeros({hidden});
  };
  if (c.embedding_norm()) norm("backbone.embeddings_norm");
  for (int i = 0; i < c.layers_size(); ++i) {
    const std::string prefix = LayerPrefix(i);
    const kernels::MixerConfig mixer = LayerMixerConfig(c, i);
    if (HasOwnNorm(mixer.kind)) norm(prefix + "norm");
    // Each layer's mixer gets its own seed drawn from the model's generator.
    auto draw_mixer = [&](const std::string& under, const kernels::MixerConfig& config) {
      const uint64_t mixer_seed = static_cast<uint64_t>(
          at::randint(0, int64_t{1} << 62, {1}, gen, at::kLong).item<int64_t>());
      for (auto& [name, t] : kernels::RandomWeights(config, mixer_seed)) w[under + name] = t;
    };
    draw_mixer(prefix + "mixer.", mixer);
    if (LayerHasParallelMixer(c, i)) {
      draw_mixer(prefix + "parallel_mixer.", ParallelMixerConfig(c, i));
    }
    if (LayerUsesSharedBlock(c, i)) {
      w[prefix + "shared_linear.weight"] =
          at::normal(0.0, 1.0 / std::sqrt(hidden), {hidden, hidden}, gen);
    }
    if (LayerHasExperts(c, i)) {
      norm(prefix + "mlp_norm");
      const uint64_t moe_seed = static_cast<uint64_t>(
          at::randint(0, int64_t{1} << 62, {1}, gen, at::kLong).item<int64_t>());
      for (auto& [name, t] : kernels::MoeMlp::RandomWeights(LayerMoeConfig(c), moe_seed)) {
        w[prefix + "mlp." + name] = t;
      }
    } else if (LayerHasMlp(c, i)) {
      norm(prefix + "mlp_norm");
      kernels::AddRandomGatedMlpWeights(prefix + "mlp.", hidden, mlp, gen, &w, !c.plain_mlp());
      if (c.mlp_bias()) {
        if (!c.plain_mlp()) w[prefix + "mlp.gate_proj.bias"] = at::normal(0.0, 0.02, {mlp}, gen);
        w[prefix + "mlp.up_proj.bias"] = at::normal(0.0, 0.02, {mlp}, gen);
        w[prefix + "mlp.down_proj.bias"] = at::normal(0.0, 0.02, {hidden}, gen);
      }
    }
  }
  if (UsesSharedBlock(c)) {
    SharedBlock::AddRandomWeights(
        c,
        static_cast<uint64_t>(
            at::randint(0, int64_t{1} << 62, {1}, gen, at::kLong).item<int64_t>()),
        &w);
  }
  norm("backbone.norm_f");
  if (!c.tie_word_embeddings()) {
    w["lm_head.weight"] = at::normal(0.0, 1.0 / std::sqrt(hidden), {c.vocab_size(), hidden}, gen);
  }
  return w;
}

}  // namespace attnserve::model

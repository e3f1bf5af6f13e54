#include "server/model/shared_block.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/common/attention_projections.h"
#include "kernels/common/rms_norm.h"
#include "kernels/common/status_macros.h"
#include "kernels/standard/standard_attention.h"
#include "server/model/model_config.h"

namespace attnserve::model {
namespace {

std::string BlockName(int64_t block, const std::string& rest) {
  return absl::StrCat("backbone.shared.", block, ".", rest);
}

std::string AdapterName(int layer, const std::string& rest) {
  return absl::StrCat("backbone.layers.", layer, ".shared_adapter.", rest);
}

// The marked layers, in order.
std::vector<int> SharedBlockLayers(const v1::ModelConfig& c) {
  std::vector<int> layers;
  for (int i = 0; i < c.layers_size(); ++i) {
    if (LayerUsesSharedBlock(c, i)) layers.push_back(i);
  }
  return layers;
}

// The adapters' (down, up) shapes of a marked layer, by name under its shared_adapter.
std::vector<std::pair<std::string, std::pair<std::vector<int64_t>, std::vector<int64_t>>>>
AdapterShapes(const v1::ModelConfig& c) {
  const kernels::MixerConfig attention = SharedBlock::AttentionConfig(c);
  const int64_t q_width = attention.num_heads * attention.head_dim();
  const int64_t kv_width = attention.kv_heads() * attention.head_dim();
  std::vector<std::pair<std::string, std::pair<std::vector<int64_t>, std::vector<int64_t>>>> out;
  if (const int64_t r = c.shared_attention_adapter_rank(); r > 0) {
    out.push_back({"q_proj", {{r, attention.d_model}, {q_width, r}}});
    out.push_back({"k_proj", {{r, attention.d_model}, {kv_width, r}}});
    out.push_back({"v_proj", {{r, attention.d_model}, {kv_width, r}}});
  }
  if (const int64_t r = c.shared_mlp_adapter_rank(); r > 0) {
    out.push_back({"gate_up_proj", {{r, c.hidden_size()}, {2 * c.intermediate_size(), r}}});
  }
  return out;
}

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

int64_t SharedBlockCount(const v1::ModelConfig& c) {
  return std::max<int64_t>(1, c.num_shared_blocks());
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
  m.rope = RotaryConfigOf(c);
  m.norm_epsilon = c.norm_epsilon();
  return m;
}

std::vector<kernels::WeightSpec> SharedBlock::ExpectedTensors(const v1::ModelConfig& c) {
  const int64_t hidden = c.hidden_size(), mlp = c.intermediate_size();
  std::vector<kernels::WeightSpec> specs;
  for (int64_t b = 0; b < SharedBlockCount(c); ++b) {
    specs.push_back({BlockName(b, "norm.weight"), {2 * hidden}});
    for (kernels::WeightSpec spec : kernels::ExpectedWeights(AttentionConfig(c))) {
      spec.name = BlockName(b, "mixer." + spec.name);
      specs.push_back(std::move(spec));
    }
    specs.push_back({BlockName(b, "mlp_norm.weight"), {hidden}});
    specs.push_back({BlockName(b, "mlp.gate_proj.weight"), {mlp, hidden}});
    specs.push_back({BlockName(b, "mlp.up_proj.weight"), {mlp, hidden}});
    specs.push_back({BlockName(b, "mlp.down_proj.weight"), {hidden, mlp}});
  }
  for (int layer : SharedBlockLayers(c)) {
    for (const auto& [name, shapes] : AdapterShapes(c)) {
      specs.push_back({AdapterName(layer, name + ".down.weight"), shapes.first});
      specs.push_back({AdapterName(layer, name + ".up.weight"), shapes.second});
    }
  }
  return specs;
}

void SharedBlock::AddRandomWeights(const v1::ModelConfig& c, uint64_t seed,
                                   std::map<std::string, at::Tensor>* w) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const int64_t hidden = c.hidden_size(), mlp = c.intermediate_size();
  for (int64_t b = 0; b < SharedBlockCount(c); ++b) {
    (*w)[BlockName(b, "norm.weight")] = at::ones({2 * hidden});
    (*w)[BlockName(b, "mlp_norm.weight")] = at::ones({hidden});
    for (auto& [name, t] : kernels::RandomWeights(AttentionConfig(c), seed + b)) {
      (*w)[BlockName(b, "mixer." + name)] = t;
    }
    kernels::AddRandomGatedMlpWeights(BlockName(b, "mlp."), hidden, mlp, gen, w);
  }
  // Each (out, in) ~ Normal(0, 1/sqrt(in)): an adapter moves its projection's output about as
  // much as the projection itself.
  for (int layer : SharedBlockLayers(c)) {
    for (const auto& [name, shapes] : AdapterShapes(c)) {
      for (const auto& [part, shape] :
           {std::pair{".down.weight", shapes.first}, std::pair{".up.weight", shapes.second}}) {
        (*w)[AdapterName(layer, name + part)] =
            at::normal(0.0, 1.0 / std::sqrt(static_cast<double>(shape[1])), shape, gen);
      }
    }
  }
}

absl::StatusOr<std::vector<std::unique_ptr<SharedBlock>>> SharedBlock::CreateUses(
    const v1::ModelConfig& c, const std::map<std::string, at::Tensor>& weights,
    kernels::WeightFormat format, at::ScalarType kv_cache_dtype) {
  auto w = [&](const std::string& name) { return weights.at(name).contiguous(); };
  kernels::MixerConfig attention = AttentionConfig(c);
  attention.weight_format = format;
  attention.kv_cache_dtype = kv_cache_dtype;
  if (absl::Status s = kernels::ValidateMixerConfig(attention); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("the shared block's attention: ", s.message()));
  }
  // Each block's matrices, made once.
  struct Block {
    at::Tensor norm, mlp_norm;
    kernels::AttentionProjections projections;
    kernels::GatedMlp mlp;
  };
  std::vector<Block> blocks;
  for (int64_t b = 0; b < SharedBlockCount(c); ++b) {
    kernels::WeightMap attention_weights;
    for (const kernels::WeightSpec& spec : kernels::ExpectedWeights(attention)) {
      attention_weights[spec.name] = w(BlockName(b, "mixer." + spec.name));
    }
    blocks.push_back({w(BlockName(b, "norm.weight")), w(BlockName(b, "mlp_norm.weight")),
                      kernels::AttentionProjections::FromConfig(attention, attention_weights),
                      kernels::GatedMlp(w(BlockName(b, "mlp.gate_proj.weight")),
                                        w(BlockName(b, "mlp.up_proj.weight")),
                                        w(BlockName(b, "mlp.down_proj.weight")), format,
                                        kernels::ParseMlpActivation(c.hidden_act()))});
  }
  std::vector<std::unique_ptr<SharedBlock>> uses;
  for (int layer : SharedBlockLayers(c)) {
    const Block& block = blocks[uses.size() % blocks.size()];
    std::unique_ptr<SharedBlock> use(new SharedBlock());
    use->norm_ = block.norm;
    use->mlp_norm_ = block.mlp_norm;
    use->epsilon_ = c.norm_epsilon();
    kernels::AttentionProjections projections = block.projections;  // the matrices shared
    use->mlp_ = block.mlp;
    if (c.shared_attention_adapter_rank() > 0) {
      auto part = [&](const char* name, const char* end) {
        return w(AdapterName(layer, absl::StrCat(name, end)));
      };
      // q's adapter carries the factor q_proj's rows carry (attention_scale).
      at::Tensor q_up =
          part("q_proj", ".up.weight") * kernels::AttentionProjections::QueryFactor(attention);
      if (kernels::IsBfloat16(format)) q_up = q_up.to(at::kBFloat16).to(at::kFloat);
      projections.qkv_adapter = kernels::LowRankAdapter(
          {part("q_proj", ".down.weight"), part("k_proj", ".down.weight"),
           part("v_proj", ".down.weight")},
          {q_up, part("k_proj", ".up.weight"), part("v_proj", ".up.weight")}, format);
    }
    if (c.shared_mlp_adapter_rank() > 0) {
      use->mlp_.gate_up_adapter =
          kernels::LowRankAdapter({w(AdapterName(layer, "gate_up_proj.down.weight"))},
                                  {w(AdapterName(layer, "gate_up_proj.up.weight"))}, format);
    }
    use->attention_ = kernels::CreateStandardMixerOver(attention, std::move(projections));
    uses.push_back(std::move(use));
  }
  return uses;
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

#include "server/model/model.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "kernels/common/linear.h"
#include "kernels/common/rms_norm.h"
#include "kernels/common/status_macros.h"
#include "kernels/common/tensor_checks.h"
#include "server/model/model_config.h"
#include "server/model/model_fingerprint.h"
#include "server/model/shared_block.h"

namespace attnserve::model {
namespace {

using kernels::ShapeString;
using kernels::WeightSpec;

std::string LayerPrefix(int i) { return absl::StrCat("backbone.layers.", i, "."); }

// The tensors whose names start with `prefix`, under the rest of their names.
kernels::WeightMap WeightsUnder(const std::map<std::string, at::Tensor>& weights,
                                const std::string& prefix) {
  kernels::WeightMap under;
  for (auto it = weights.lower_bound(prefix);
       it != weights.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
    under[it->first.substr(prefix.size())] = it->second;
  }
  return under;
}

}  // namespace

std::string Model::LengthNote(int64_t length) const {
  if (interpolates_past_ == 0 || length <= interpolates_past_) return "";
  return absl::StrCat("linformer E and F interpolated from ", interpolates_past_, " to ", length,
                      " rows");
}

int64_t ModelState::Bytes() const {
  int64_t bytes = 0;
  for (const kernels::MixerState& s : layers) bytes += s.Bytes();
  return bytes;
}

ModelState ModelState::Clone() const {
  ModelState copy;
  copy.position = position;
  for (const kernels::MixerState& s : layers) copy.layers.push_back(s.Clone());
  return copy;
}

Model::~Model() = default;

std::vector<WeightSpec> Model::ExpectedTensors(const v1::ModelConfig& c) {
  const int64_t hidden = c.hidden_size();
  // With a shared block, intermediate_size is its MLP's: the layers have none.
  const int64_t mlp = UsesSharedBlock(c) ? 0 : c.intermediate_size();
  std::vector<WeightSpec> specs = {{"backbone.embeddings.weight", {c.vocab_size(), hidden}}};
  auto norm = [&](const std::string& name) {
    specs.push_back({name + ".weight", {hidden}});
    if (UsesLayerNorm(c)) specs.push_back({name + ".bias", {hidden}});
  };
  if (c.embedding_norm()) norm("backbone.embeddings_norm");
  for (int i = 0; i < c.layers_size(); ++i) {
    const std::string prefix = LayerPrefix(i);
    const kernels::MixerConfig mixer = LayerMixerConfig(c, i);
    const bool owns_norms = kernels::MixerOwnsNorms(mixer.kind);
    if (!owns_norms) norm(prefix + "norm");
    for (WeightSpec spec : kernels::ExpectedWeights(mixer)) {
      spec.name = prefix + "mixer." + spec.name;
      specs.push_back(std::move(spec));
    }
    if (LayerUsesSharedBlock(c, i))
      specs.push_back({prefix + "shared_linear.weight", {hidden, hidden}});
    if (mlp > 0 && !owns_norms && LayerHasExperts(c, i)) {
      norm(prefix + "mlp_norm");
      for (WeightSpec spec : kernels::MoeMlp::ExpectedWeights(LayerMoeConfig(c))) {
        spec.name = prefix + "mlp." + spec.name;
        specs.push_back(std::move(spec));
      }
    } else if (mlp > 0 && !owns_norms) {
      norm(prefix + "mlp_norm");
      specs.push_back({prefix + "mlp.gate_proj.weight", {mlp, hidden}});
      specs.push_back({prefix + "mlp.up_proj.weight", {mlp, hidden}});
      specs.push_back({prefix + "mlp.down_proj.weight", {hidden, mlp}});
      if (c.mlp_bias()) {
        specs.push_back({prefix + "mlp.gate_proj.bias", {mlp}});
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
  const int64_t mlp = UsesSharedBlock(c) ? 0 : c.intermediate_size();
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
    const bool owns_norms = kernels::MixerOwnsNorms(mixer.kind);
    if (!owns_norms) norm(prefix + "norm");
    // Each layer's mixer gets its own seed drawn from the model's generator.
    const uint64_t mixer_seed = static_cast<uint64_t>(
        at::randint(0, int64_t{1} << 62, {1}, gen, at::kLong).item<int64_t>());
    for (auto& [name, t] : kernels::RandomWeights(mixer, mixer_seed)) {
      w[prefix + "mixer." + name] = t;
    }
    if (LayerUsesSharedBlock(c, i)) {
      w[prefix + "shared_linear.weight"] =
          at::normal(0.0, 1.0 / std::sqrt(hidden), {hidden, hidden}, gen);
    }
    if (mlp > 0 && !owns_norms && LayerHasExperts(c, i)) {
      norm(prefix + "mlp_norm");
      const uint64_t moe_seed = static_cast<uint64_t>(
          at::randint(0, int64_t{1} << 62, {1}, gen, at::kLong).item<int64_t>());
      for (auto& [name, t] : kernels::MoeMlp::RandomWeights(LayerMoeConfig(c), moe_seed)) {
        w[prefix + "mlp." + name] = t;
      }
    } else if (mlp > 0 && !owns_norms) {
      norm(prefix + "mlp_norm");
      kernels::AddRandomGatedMlpWeights(prefix + "mlp.", hidden, mlp, gen, &w);
      if (c.mlp_bias()) {
        w[prefix + "mlp.gate_proj.bias"] = at::normal(0.0, 0.02, {mlp}, gen);
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

absl::StatusOr<std::unique_ptr<Model>> Model::Create(std::string name, v1::ModelConfig config,
                                                     std::map<std::string, at::Tensor> weights,
                                                     const ModelOptions& options) {
  const at::Device& device = options.device;
  const kernels::WeightFormat format =
      options.precision == WeightPrecision::kBfloat16      ? kernels::WeightFormat::kBfloat16
      : options.precision == WeightPrecision::kBfloat16Dot ? kernels::WeightFormat::kBfloat16Dot
      : options.precision == WeightPrecision::kInt8        ? kernels::WeightFormat::kInt8
      : options.precision == WeightPrecision::kInt8PerRow  ? kernels::WeightFormat::kInt8PerRow
                                                           : kernels::WeightFormat::kFloat32;
  const bool bf16 = kernels::IsBfloat16(format);  // the weights rounded at load
  if (kernels::IsInt8(format) && !device.is_cpu()) {
    return absl::InvalidArgumentError("int8 weights are served on the CPU only");
  }
  if (format == kernels::WeightFormat::kBfloat16Dot && !device.is_cpu()) {
    return absl::InvalidArgumentError("bfloat16 activations are served on the CPU only");
  }
  if (options.kv_cache_dtype != at::kFloat && options.kv_cache_dtype != at::kBFloat16) {
    return absl::InvalidArgumentError(absl::StrCat("a KV cache of ",
                                                   kernels::DTypeName(options.kv_cache_dtype),
                                                   ": expected float32 or bfloat16"));
  }
  if (options.kv_cache_dtype != at::kFloat && !device.is_cpu()) {
    return absl::InvalidArgumentError("a bfloat16 KV cache is served on the CPU only");
  }
  RETURN_IF_ERROR(ValidateModelConfig(config));
  const std::vector<WeightSpec> specs = ExpectedTensors(config);
  std::set<std::string> expected;
  for (const WeightSpec& spec : specs) {
    expected.insert(spec.name);
    auto it = weights.find(spec.name);
    if (it == weights.end()) {
      return absl::InvalidArgumentError(absl::StrCat("model '", name, "': missing tensor '",
                                                     spec.name, "' of shape ",
                                                     ShapeString(spec.shape)));
    }
    const at::Tensor& t = it->second;
    if (!t.defined() || t.scalar_type() != at::kFloat || t.sizes() != at::IntArrayRef(spec.shape)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model '", name, "': tensor '", spec.name, "' expected float32 ", ShapeString(spec.shape),
          ", got ", t.defined() ? kernels::DTypeName(t.scalar_type()) : "undefined", " ",
          t.defined() ? ShapeString(t.sizes()) : "()"));
    }
  }
  for (const auto& [tensor_name, t] : weights) {
    if (!expected.count(tensor_name)) {
      return absl::InvalidArgumentError(absl::StrCat("model '", name, "': unexpected tensor '",
                                                     tensor_name, "' ", ShapeString(t.sizes())));
    }
  }

  if (bf16) {
    RETURN_IF_ERROR(kernels::GuardTorch("rounding the weights to bfloat16", [&]() -> absl::Status {
      for (auto& [tensor_name, t] : weights) t = t.to(at::kBFloat16).to(at::kFloat);
      return absl::OkStatus();
    }));
  }
  // Identifies the weights as served (rounded or not; on the CPU, whatever the device).
  uint64_t fingerprint = Fingerprint(config, specs, weights);
  // Int8 weights are quantized inside the LinearWeights, not in `weights`, and bfloat16
  // activations change every product: a state of the float32 (or bf16) model is not one of these.
  if (kernels::IsInt8(format) || format == kernels::WeightFormat::kBfloat16Dot) {
    const int tag = static_cast<int>(format);
    fingerprint = Fnv(fingerprint, &tag, sizeof(tag));
  }
  // Nor is a state of rounded keys and values one of a float32 cache (when a layer has one).
  bool standard_layers = UsesSharedBlock(config);  // its attention keeps a KV cache too
  for (int i = 0; i < config.layers_size(); ++i) {
    standard_layers |= LayerMixerConfig(config, i).kind == kernels::MixerKind::kStandard;
  }
  if (options.kv_cache_dtype != at::kFloat && standard_layers) {
    const int tag = 0x4b56 + static_cast<int>(options.kv_cache_dtype);  // "KV"
    fingerprint = Fnv(fingerprint, &tag, sizeof(tag));
  }
  if (!device.is_cpu()) {
    RETURN_IF_ERROR(kernels::GuardTorch("moving the weights to the device", [&]() -> absl::Status {
      for (auto& [tensor_name, t] : weights) t = t.to(device);
      return absl::OkStatus();
    }));
  }

  std::unique_ptr<Model> m(new Model());
  m->name_ = std::move(name);
  m->config_ = std::move(config);
  const v1::ModelConfig& c = m->config_;
  m->max_sequence_length_ = c.max_sequence_length();
  auto or_one = [](double v) { return v > 0 ? v : 1.0; };
  m->embedding_multiplier_ = or_one(c.embedding_multiplier());
  m->residual_multiplier_ = or_one(c.residual_multiplier());
  m->logits_divisor_ = or_one(c.logits_divisor());
  auto w = [&](const std::string& n) { return weights.at(n).contiguous(); };
  auto norm = [&](const std::string& n, double epsilon) {
    NormWeights norm_weights{w(n + ".weight"), {}, epsilon};
    if (UsesLayerNorm(c)) norm_weights.bias = w(n + ".bias");
    return norm_weights;
  };
  const at::Tensor embedding = w("backbone.embeddings.weight");
  if (c.embedding_norm()) m->embedding_norm_ = norm("backbone.embeddings_norm", c.norm_epsilon());
  m->norm_f_ = norm("backbone.norm_f", FinalNormEpsilon(c));
  m->lm_head_ =
      kernels::LinearWeight(c.tie_word_embeddings() ? embedding : w("lm_head.weight"), format);
  // Tied float32 and bfloat16 embeddings are looked up in the lm_head's panels (the same values,
  // but for bfloat16 denormals, which kBfloat16Dot flushes): no second matrix of the vocabulary's
  // size is kept. Int8 rows are quantized: an int8 model keeps its float32 embedding.
  m->embeddings_in_lm_head_ =
      c.tie_word_embeddings() && !kernels::IsInt8(format) && device.is_cpu();
  if (!m->embeddings_in_lm_head_) m->embedding_ = embedding;
  size_t shared_uses = 0;  // the shared blocks' uses so far: their KV slots follow the layers'
  if (UsesSharedBlock(c)) {
    absl::StatusOr<std::vector<std::unique_ptr<SharedBlock>>> uses =
        SharedBlock::CreateUses(c, weights, format, options.kv_cache_dtype);
    if (!uses.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("model '", m->name_, "': ", uses.status().message()));
    }
    m->shared_uses_ = *std::move(uses);
  }
  for (int i = 0; i < c.layers_size(); ++i) {
    const std::string prefix = LayerPrefix(i);
    Layer layer;
    kernels::MixerConfig mixer_config = LayerMixerConfig(c, i);
    const bool owns_norms = kernels::MixerOwnsNorms(mixer_config.kind);
    if (!owns_norms) layer.norm = norm(prefix + "norm", c.norm_epsilon());
    kernels::WeightMap mixer_weights = WeightsUnder(weights, prefix + "mixer.");
    mixer_config.weight_format = format;
    mixer_config.kv_cache_dtype = options.kv_cache_dtype;
    absl::StatusOr<std::unique_ptr<kernels::Mixer>> mixer =
        kernels::CreateMixer(mixer_config, std::move(mixer_weights));
    if (!mixer.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("model '", m->name_, "' layer ", i, ": ", mixer.status().message()));
    }
    layer.mixer = *std::move(mixer);
    m->can_stream_ = m->can_stream_ && layer.mixer->can_stream();
    if (mixer_config.kind == kernels::MixerKind::kLinformer &&
        !mixer_config.linformer_interpolate) {
      m->max_sequence_length_ = std::min(m->max_sequence_length_, mixer_config.max_len);
    }
    if (mixer_config.kind == kernels::MixerKind::kLinformer && mixer_config.linformer_interpolate) {
      m->interpolates_past_ = m->interpolates_past_ == 0
                                  ? mixer_config.max_len
                                  : std::min(m->interpolates_past_, mixer_config.max_len);
    }
    if (LayerUsesSharedBlock(c, i)) {
      layer.shared = m->shared_uses_[shared_uses].get();
      layer.shared_linear = kernels::LinearWeight(w(prefix + "shared_linear.weight"), format);
      layer.shared_slot = c.layers_size() + shared_uses++;
    }
    if (c.intermediate_size() > 0 && !owns_norms && !UsesSharedBlock(c)) {
      layer.mlp_norm = norm(prefix + "mlp_norm", c.norm_epsilon());
      const kernels::MlpActivation act = kernels::ParseMlpActivation(c.hidden_act());
      if (LayerHasExperts(c, i)) {
        layer.moe = std::make_unique<kernels::MoeMlp>(
            LayerMoeConfig(c), WeightsUnder(weights, prefix + "mlp."), format);
      } else {
        auto bias = [&](const char* proj) {
          return c.mlp_bias() ? w(prefix + "mlp." + proj + ".bias") : at::Tensor();
        };
        layer.mlp =
            kernels::GatedMlp(w(prefix + "mlp.gate_proj.weight"), w(prefix + "mlp.up_proj.weight"),
                              w(prefix + "mlp.down_proj.weight"), format, act, bias("gate_proj"),
                              bias("up_proj"), bias("down_proj"));
      }
    }
    m->layers_.push_back(std::move(layer));
  }
  m->state_slots_ = c.layers_size() + shared_uses;

  m->fingerprint_ = fingerprint;
  // What a decode step reads: every weight but the embedding table (a step looks up B rows of
  // it; tied, it is lm_head and read whole), at the bytes per element of the format (int8's
  // scales and its float32 leftovers left out: this sizes the scheduler's split, not memory).
  const int64_t element_bytes = kernels::IsBfloat16(format) ? 2 : kernels::IsInt8(format) ? 1 : 4;
  for (const auto& [tensor_name, t] : weights) {
    if (tensor_name == "backbone.embeddings.weight" && !c.tie_word_embeddings()) continue;
    m->decode_weight_bytes_ += t.numel() * element_bytes;
  }
  // The tensors as loaded, for NamedWeights: the matrices live in their LinearWeights' panels
  // (or in bfloat16 or int8), so keeping them holds the matrices twice; only an exportable
  // float32 model does (bfloat16 and int8 ones have no float32 values to give back).
  if (format == kernels::WeightFormat::kFloat32 && options.exportable) {
    m->weights_ = std::move(weights);
  }
  if (m->can_stream_) {
    ASSIGN_OR_RETURN(ModelState fresh, m->NewState(1));
    for (const kernels::MixerState& layer : fresh.layers) {
      std::vector<bool>& flags = m->growing_caches_.emplace_back();
      for (const at::Tensor& t : layer.tensors) {
        flags.push_back(t.defined() && t.dim() > 2 && t.size(2) == 0);
      }
    }
  }
  return m;
}

int64_t Model::StepKeysRead(int64_t position) const {
  int64_t keys = 0;
  for (const Layer& layer : layers_) {
    keys += layer.mixer->StepKeysRead(position);
    if (layer.shared != nullptr) keys += layer.shared->attention().StepKeysRead(position);
  }
  return keys;
}

int64_t Model::StateBytesPerSequence(int64_t position) const {
  int64_t bytes = 0;
  for (const Layer& layer : layers_) {
    bytes += layer.mixer->StateBytesPerSequence(position);
    if (layer.shared != nullptr) {
      bytes += layer.shared->attention().StateBytesPerSequence(position);
    }
  }
  return bytes;
}

absl::StatusOr<ModelState> Model::NewState(int64_t batch) const {
  if (!can_stream_) {
    return absl::FailedPreconditionError(
        absl::StrCat("model '", name_,
                     "' cannot stream: it has a non-causal layer (linformer or a "
                     "bidirectional attention); send whole sequences without a session"));
  }
  ModelState state;
  for (const Layer& layer : layers_) {
    ASSIGN_OR_RETURN(kernels::MixerState s, layer.mixer->InitialState(batch));
    state.layers.push_back(std::move(s));
  }
  // The shared block's KV cache of each layer that uses it (Layer::shared_slot).
  for (const Layer& layer : layers_) {
    if (layer.shared == nullptr) continue;
    ASSIGN_OR_RETURN(kernels::MixerState s, layer.shared->attention().InitialState(batch));
    state.layers.push_back(std::move(s));
  }
  return state;
}

absl::Status Model::CheckTokens(const at::Tensor& tokens, const ModelState* state) const {
  if (!tokens.defined() || tokens.scalar_type() != at::kLong || tokens.dim() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokens: expected int64 (batch, length), got ",
                     tokens.defined() ? kernels::DTypeName(tokens.scalar_type()) : "none", " ",
                     tokens.defined() ? ShapeString(tokens.sizes()) : "()"));
  }
  if (tokens.size(0) == 0 || tokens.size(1) == 0) {
    return absl::InvalidArgumentError("tokens: no tokens given");
  }
  const int64_t total = tokens.size(1) + (state ? state->position : 0);
  if (total > max_sequence_length()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "sequence of ", total, " tokens", state && state->position ? " (with the session's)" : "",
        " exceeds model '", name_, "' max_sequence_length ", max_sequence_length()));
  }
  const int64_t lo = tokens.min().item<int64_t>(), hi = tokens.max().item<int64_t>();
  if (lo < 0 || hi >= vocab_size()) {
    return absl::InvalidArgumentError(absl::StrCat("token id ", lo < 0 ? lo : hi,
                                                   " is outside the vocabulary [0, ", vocab_size(),
                                                   ") of model '", name_, "'"));
  }
  if (state && static_cast<int64_t>(state->layers.size()) != state_slots_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "state has ", state->layers.size(), " layers, model '", name_, "' has ", state_slots_));
  }
  return absl::OkStatus();
}

at::Tensor Model::Norm(const at::Tensor& x, const NormWeights& norm) const {
  if (!norm.weight.defined()) return x;
  if (norm.bias.defined()) {
    return at::layer_norm(x, {x.size(-1)}, norm.weight, norm.bias, norm.epsilon);
  }
  // One pass instead of six ATen operations (kernels/common/rms_norm.h).
  return kernels::RmsNorm(x, norm.weight, norm.epsilon);
}

at::Tensor Model::Embed(const at::Tensor& ids) const {
  at::Tensor x = embeddings_in_lm_head_ ? lm_head_.Rows(ids) : at::embedding(embedding_, ids);
  if (embedding_multiplier_ != 1) x.mul_(embedding_multiplier_);
  return Norm(x, embedding_norm_);
}

at::Tensor Model::Residual(at::Tensor output) const {
  return residual_multiplier_ != 1 ? output * residual_multiplier_ : output;
}

at::Tensor Model::Logits(const at::Tensor& normed) const {
  at::Tensor logits = lm_head_(normed);
  if (logits_divisor_ != 1) logits.div_(logits_divisor_);
  return logits.cpu();
}

absl::StatusOr<at::Tensor> Model::RunLayers(at::Tensor x, ModelState* state) const {
  const bool step = state != nullptr && x.size(1) == 1;
  const at::Tensor embeddings = x;  // the shared block's second input
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& layer = layers_[i];
    kernels::MixerState* s = state ? &state->layers[i] : nullptr;
    at::Tensor input = x;
    if (layer.shared != nullptr) {  // Zamba's hybrid layer: x + shared_linear(block(x, x0))
      ASSIGN_OR_RETURN(const at::Tensor t,
                       layer.shared->Prefill(x, embeddings,
                                             state ? &state->layers[layer.shared_slot] : nullptr));
      input = x + layer.shared_linear(t);
    }
    at::Tensor normed = Norm(input, layer.norm);
    at::Tensor mixed;
    if (step) {
      ASSIGN_OR_RETURN(mixed, layer.mixer->Step(normed.squeeze(1), s));
      mixed = mixed.unsqueeze(1);
    } else {
      ASSIGN_OR_RETURN(mixed, layer.mixer->Prefill(normed, s));
    }
    x = AddMlp(layer, x + Residual(mixed));
  }
  return x;  // a layer that owns its norms: Norm and AddMlp pass x through
}

at::Tensor Model::AddMlp(const Layer& layer, const at::Tensor& x) const {
  if (layer.moe) return x + Residual((*layer.moe)(Norm(x, layer.mlp_norm)));
  if (!layer.mlp.defined()) return x;  // no MLP, or a mixer that owns its norms
  return x + Residual(layer.mlp(Norm(x, layer.mlp_norm)));
}

absl::StatusOr<at::Tensor> Model::StepBatch(const std::vector<int64_t>& tokens,
                                            const std::vector<ModelState*>& states,
                                            int parts) const {
  if (tokens.empty() || tokens.size() != states.size()) {
    return absl::InvalidArgumentError(absl::StrCat("StepBatch: ", tokens.size(), " tokens and ",
                                                   states.size(),
                                                   " states; expected B > 0 of each"));
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab_size()) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", tokens[i],
                                                     " is outside the vocabulary [0, ",
                                                     vocab_size(), ") of model '", name_, "'"));
    }
    const ModelState* state = states[i];
    if (state == nullptr || static_cast<int64_t>(state->layers.size()) != state_slots_) {
      return absl::InvalidArgumentError(
          absl::StrCat("StepBatch: state ", i, " is not a state of model '", name_, "'"));
    }
    if (state->position + 1 > max_sequence_length()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("sequence of ", state->position + 1, " tokens exceeds model '", name_,
                       "' max_sequence_length ", max_sequence_length()));
    }
  }
  const size_t b = tokens.size();
  parts = static_cast<int>(std::min<size_t>(std::max(parts, 1), b));
  return kernels::GuardTorch("Model::StepBatch", [&]() -> absl::StatusOr<at::Tensor> {
    if (parts == 1) return StepRows(tokens, states, 0, b);
    // Each part on one thread: at::parallel_for runs a task per part, and every kernel inside
    // sees in_parallel_region() and runs single-threaded. Part p holds rows
    // [p b / parts, (p + 1) b / parts).
    std::vector<absl::StatusOr<at::Tensor>> logits(parts);
    at::parallel_for(0, parts, 1, [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        logits[p] = StepRows(tokens, states, p * b / parts, (p + 1) * b / parts);
      }
    });
    std::vector<at::Tensor> rows;
    for (absl::StatusOr<at::Tensor>& part : logits) {
      if (!part.ok()) return part.status();
      rows.push_back(*std::move(part));
    }
    return at::cat(rows, 0);
  });
}

absl::StatusOr<at::Tensor> Model::StepRows(const std::vector<int64_t>& tokens,
                                           const std::vector<ModelState*>& states, size_t begin,
                                           size_t end) const {
  const std::vector<int64_t> ids_of_rows(tokens.begin() + begin, tokens.begin() + end);
  const at::Tensor ids = at::tensor(ids_of_rows, at::kLong).to(device());
  at::Tensor x = Embed(ids);  // (rows, hidden)
  const at::Tensor embeddings = x;
  std::vector<kernels::MixerState*> layer_states(end - begin);
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& layer = layers_[l];
    at::Tensor input = x;
    if (layer.shared != nullptr) {  // Zamba's hybrid layer (RunLayers)
      for (size_t i = begin; i < end; ++i) {
        layer_states[i - begin] = &states[i]->layers[layer.shared_slot];
      }
      ASSIGN_OR_RETURN(const at::Tensor t, layer.shared->StepBatch(x, embeddings, layer_states));
      input = x + layer.shared_linear(t);
    }
    for (size_t i = begin; i < end; ++i) layer_states[i - begin] = &states[i]->layers[l];
    ASSIGN_OR_RETURN(at::Tensor mixed,
                     layer.mixer->StepBatch(Norm(input, layer.norm), layer_states));
    x = AddMlp(layer, x + Residual(mixed));
  }
  for (size_t i = begin; i < end; ++i) states[i]->position += 1;
  return Logits(Norm(x, norm_f_));
}

absl::StatusOr<at::Tensor> Model::Forward(const at::Tensor& tokens, ModelState* state,
                                          OutputKind output) const {
  RETURN_IF_ERROR(CheckTokens(tokens, state));
  return kernels::GuardTorch("Model::Forward", [&]() -> absl::StatusOr<at::Tensor> {
    // .to(): the model's device; a no-op on the CPU.
    ASSIGN_OR_RETURN(at::Tensor x, RunLayers(Embed(tokens.to(device())), state));
    x = Norm(x, norm_f_);
    if (state != nullptr) state->position += tokens.size(1);
    switch (output) {
      case OutputKind::kHidden:
        return x.cpu();
      case OutputKind::kAllLogits:
        return Logits(x);
      case OutputKind::kLastLogits:
        return Logits(x.select(1, x.size(1) - 1));
    }
    return absl::InvalidArgumentError("unknown output kind");
  });
}

absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> Model::NamedWeights() const {
  if (weights_.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "model '", name_,
        "' keeps its weight matrices only in its products' layout (bfloat16, int8, or not "
        "exportable); load it in float32 with ModelOptions::exportable to export it"));
  }
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const WeightSpec& spec : ExpectedTensors(config_)) {
    out.emplace_back(spec.name, weights_.at(spec.name));
  }
  return out;
}

}  // namespace attnserve::model

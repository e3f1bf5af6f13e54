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
#include "server/model/layer_layout.h"
#include "server/model/model_config.h"
#include "server/model/model_fingerprint.h"
#include "server/model/shared_block.h"

namespace attnserve::model {
namespace {

using kernels::ShapeString;
using kernels::WeightSpec;

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
    standard_layers |= LayerHasParallelMixer(config, i) &&
                       ParallelMixerConfig(config, i).kind == kernels::MixerKind::kStandard;
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
  auto create_mixer = [&](kernels::MixerConfig config, const std::string& prefix,
                          int i) -> absl::StatusOr<std::unique_ptr<kernels::Mixer>> {
    config.weight_format = format;
    config.kv_cache_dtype = options.kv_cache_dtype;
    absl::StatusOr<std::unique_ptr<kernels::Mixer>> mixer =
        kernels::CreateMixer(config, WeightsUnder(weights, prefix));
    if (!mixer.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("model '", m->name_, "' layer ", i, ": ", mixer.status().message()));
    }
    m->can_stream_ = m->can_stream_ && (*mixer)->can_stream();
    return mixer;
  };
  for (int i = 0; i < c.layers_size(); ++i) {
    const std::string prefix = LayerPrefix(i);
    Layer layer;
    const kernels::MixerConfig mixer_config = LayerMixerConfig(c, i);
    if (HasOwnNorm(mixer_config.kind)) layer.norm = norm(prefix + "norm", c.norm_epsilon());
    ASSIGN_OR_RETURN(layer.mixer, create_mixer(mixer_config, prefix + "mixer.", i));
    layer.mixes = mixer_config.kind != kernels::MixerKind::kNone;
    if (LayerHasParallelMixer(c, i)) {
      ASSIGN_OR_RETURN(layer.parallel,
                       create_mixer(ParallelMixerConfig(c, i), prefix + "parallel_mixer.", i));
    }
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
    if (LayerHasMlp(c, i)) {
      layer.mlp_norm = norm(prefix + "mlp_norm", c.norm_epsilon());
      const kernels::MlpActivation act = kernels::ParseMlpActivation(c.hidden_act());
      if (LayerHasExperts(c, i)) {
        layer.moe = std::make_unique<kernels::MoeMlp>(
            LayerMoeConfig(c), WeightsUnder(weights, prefix + "mlp."), format);
      } else {
        auto maybe = [&](const std::string& tensor) {
          return weights.count(prefix + "mlp." + tensor) ? w(prefix + "mlp." + tensor)
                                                         : at::Tensor();
        };
        layer.mlp = kernels::GatedMlp(maybe("gate_proj.weight"), w(prefix + "mlp.up_proj.weight"),
                                      w(prefix + "mlp.down_proj.weight"), format, act,
                                      maybe("gate_proj.bias"), maybe("up_proj.bias"),
                                      maybe("down_proj.bias"));
      }
    }
    m->layers_.push_back(std::move(layer));
  }
  m->state_slots_ = c.layers_size() + shared_uses;
  for (Layer& layer : m->layers_) {  // the parallel mixers' slots follow the shared blocks'
    if (layer.parallel) layer.parallel_slot = m->state_slots_++;
  }

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
    if (layer.parallel) keys += layer.parallel->StepKeysRead(position);
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
    if (layer.parallel) bytes += layer.parallel->StateBytesPerSequence(position);
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
  for (const Layer& layer : layers_) {  // then each parallel mixer's (Layer::parallel_slot)
    if (!layer.parallel) continue;
    ASSIGN_OR_RETURN(kernels::MixerState s, layer.parallel->InitialState(batch));
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
    if (!layer.mixes) {  // an MLP alone; its empty state only advances
      if (s != nullptr) s->position += x.size(1);
      x = AddMlp(layer, x);
      continue;
    }
    const at::Tensor normed = Norm(input, layer.norm);
    auto mix = [&](const kernels::Mixer& mixer,
                   kernels::MixerState* mixer_state) -> absl::StatusOr<at::Tensor> {
      if (!step) return mixer.Prefill(normed, mixer_state);
      ASSIGN_OR_RETURN(const at::Tensor y, mixer.Step(normed.squeeze(1), mixer_state));
      return y.unsqueeze(1);
    };
    ASSIGN_OR_RETURN(at::Tensor mixed, mix(*layer.mixer, s));
    if (layer.parallel) {
      ASSIGN_OR_RETURN(const at::Tensor beside,
                       mix(*layer.parallel, state ? &state->layers[layer.parallel_slot] : nullptr));
      mixed = mixed + beside;
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
    if (!layer.mixes) {  // an MLP alone (RunLayers)
      for (size_t i = begin; i < end; ++i) states[i]->layers[l].position += 1;
      x = AddMlp(layer, x);
      continue;
    }
    const at::Tensor normed = Norm(input, layer.norm);
    for (size_t i = begin; i < end; ++i) layer_states[i - begin] = &states[i]->layers[l];
    ASSIGN_OR_RETURN(at::Tensor mixed, layer.mixer->StepBatch(normed, layer_states));
    if (layer.parallel) {
      for (size_t i = begin; i < end; ++i) {
        layer_states[i - begin] = &states[i]->layers[layer.parallel_slot];
      }
      ASSIGN_OR_RETURN(const at::Tensor beside, layer.parallel->StepBatch(normed, layer_states));
      mixed = mixed + beside;
    }
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

#include "kernels/common/mixer.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/common/mixer_registry.h"
#include "kernels/common/no_mixer.h"
#include "kernels/common/tensor_checks.h"

namespace attnserve::kernels {

const char* MixerKindName(MixerKind kind) {
  switch (kind) {
    case MixerKind::kStandard:
      return "standard";
    case MixerKind::kLinformer:
      return "linformer";
    case MixerKind::kLinear:
      return "linear";
    case MixerKind::kMamba:
      return "mamba";
    case MixerKind::kSlidingWindow:
      return "sliding_window";
    case MixerKind::kPerformer:
      return "performer";
    case MixerKind::kRwkv:
      return "rwkv";
    case MixerKind::kSparse:
      return "sparse";
    case MixerKind::kMamba2:
      return "mamba2";
    case MixerKind::kShortConv:
      return "short_conv";
    case MixerKind::kNone:
      return "none";
  }
  return "unknown";
}

bool MixerOwnsNorms(MixerKind kind) { return kind == MixerKind::kRwkv; }

absl::StatusOr<MixerKind> ParseMixerKind(const std::string& name) {
  for (MixerKind kind :
       {MixerKind::kStandard, MixerKind::kLinformer, MixerKind::kLinear, MixerKind::kMamba,
        MixerKind::kSlidingWindow, MixerKind::kPerformer, MixerKind::kRwkv, MixerKind::kSparse,
        MixerKind::kMamba2, MixerKind::kShortConv, MixerKind::kNone}) {
    if (name == MixerKindName(kind)) return kind;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown mixer '", name,
      "'; expected one of standard, linformer, linear, mamba, sliding_window, performer, rwkv, "
      "sparse, mamba2, short_conv, none"));
}

namespace {

// The Mamba-2 mixer's sizes: heads that split d_inner, groups that split the heads.
absl::Status ValidateMamba2Config(const MixerConfig& c) {
  for (auto [field, value] : {std::pair<const char*, int64_t>{"d_state", c.d_state},
                              {"d_conv", c.d_conv},
                              {"expand", c.expand},
                              {"ssm_heads", c.ssm_heads},
                              {"ssm_groups", c.ssm_groups},
                              {"ssm_chunk_size", c.ssm_chunk_size}}) {
    if (value <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(field, " must be > 0, got ", value));
    }
  }
  if (c.inner_dim < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("inner_dim must be >= 0 (0: expand · d_model), got ", c.inner_dim));
  }
  if (c.d_inner() % c.ssm_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "d_inner (", c.d_inner(), ") must be a multiple of ssm_heads (", c.ssm_heads, ")"));
  }
  if (c.ssm_heads % c.ssm_groups != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ssm_heads (", c.ssm_heads, ") must be a multiple of ssm_groups (", c.ssm_groups, ")"));
  }
  if (!(c.dt_min >= 0) || !(c.dt_max > c.dt_min)) {
    return absl::InvalidArgumentError(
        absl::StrCat("time_step_limit must be [min, max] with 0 <= min < max, got [", c.dt_min,
                     ", ", c.dt_max, "]"));
  }
  if (!(c.norm_epsilon > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("norm_epsilon must be > 0, got ", c.norm_epsilon));
  }
  return absl::OkStatus();
}

// The standard mixer's heads, head width, key/value groups, window and positions.
absl::Status ValidateStandardAttentionConfig(const MixerConfig& c) {
  if (c.attention_head_dim < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("head_dim must be >= 0 (0: d_model / num_heads), got ", c.attention_head_dim));
  }
  if (c.attention_head_dim == 0 && c.d_model % c.num_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("d_model (", c.d_model,
                                                   ") must be a multiple of num_heads (",
                                                   c.num_heads, ") unless head_dim is given"));
  }
  if (c.num_kv_heads < 0 || (c.num_kv_heads > 0 && c.num_heads % c.num_kv_heads != 0)) {
    return absl::InvalidArgumentError(absl::StrCat("num_heads (", c.num_heads,
                                                   ") must be a multiple of num_key_value_heads (",
                                                   c.num_kv_heads, ")"));
  }
  if (c.attention_window < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the attention window must be >= 0 (0: none), got ", c.attention_window));
  }
  if (!(c.attention_scale >= 0) || c.out_dim < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the attention scale (0: head_dim^-1/2) and output width (0: d_model) must "
                     "be >= 0, got ",
                     c.attention_scale, " and ", c.out_dim));
  }
  if (c.attention_window > 0 && !c.causal) {
    return absl::InvalidArgumentError("an attention window needs causal attention");
  }
  return ValidateRotaryConfig(c.rope, c.head_dim());
}

}  // namespace

absl::Status ValidateMixerConfig(const MixerConfig& c) {
  auto positive = [](const char* field, int64_t value) -> absl::Status {
    if (value > 0) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(field, " must be > 0, got ", value));
  };
  for (auto [field, value] : {std::pair<const char*, int64_t>{"d_model", c.d_model}}) {
    if (auto s = positive(field, value); !s.ok()) return s;
  }
  switch (c.kind) {
    case MixerKind::kLinformer:
      if (c.causal) {
        return absl::InvalidArgumentError(
            "linformer is not causal: its projections mix all positions; set causal = false");
      }
      if (auto s = positive("linformer_k", c.linformer_k); !s.ok()) return s;
      if (auto s = positive("max_len", c.max_len); !s.ok()) return s;
      [[fallthrough]];
    case MixerKind::kSlidingWindow:
      if (c.kind == MixerKind::kSlidingWindow) {
        if (!c.causal) {
          return absl::InvalidArgumentError(
              "sliding_window is causal: each token sees the ones before it; set causal = true");
        }
        if (auto s = positive("window", c.window); !s.ok()) return s;
        if (c.sinks < 0) {
          return absl::InvalidArgumentError(
              absl::StrCat("sinks must be >= 0 (0: none), got ", c.sinks));
        }
      }
      [[fallthrough]];
    case MixerKind::kSparse:
      if (c.kind == MixerKind::kSparse) {
        if (c.sparse_pattern != "strided" && c.sparse_pattern != "fixed") {
          return absl::InvalidArgumentError(absl::StrCat(
              "sparse_pattern must be \"strided\" or \"fixed\", got \"", c.sparse_pattern, "\""));
        }
        if (auto s = positive("sparse_stride", c.sparse_stride); !s.ok()) return s;
        if (c.sparse_pattern == "fixed" &&
            (c.sparse_summary < 1 || c.sparse_summary > c.sparse_stride)) {
          return absl::InvalidArgumentError(
              absl::StrCat("sparse_c (the fixed pattern's summary columns) must be in [1, "
                           "sparse_stride = ",
                           c.sparse_stride, "], got ", c.sparse_summary));
        }
      }
      [[fallthrough]];
    case MixerKind::kStandard:
    case MixerKind::kLinear:
    case MixerKind::kPerformer:
      if (auto s = positive("num_heads", c.num_heads); !s.ok()) return s;
      if (c.kind == MixerKind::kStandard) return ValidateStandardAttentionConfig(c);
      if (c.num_kv_heads != 0 && c.num_kv_heads != c.num_heads) {
        return absl::InvalidArgumentError(absl::StrCat(
            MixerKindName(c.kind), " attention takes no grouped key/value heads (num_kv_heads ",
            c.num_kv_heads, " != num_heads ", c.num_heads, "): only standard does"));
      }
      if (c.attention_head_dim != 0 || c.qkv_bias || c.o_bias || c.rope.enabled() || c.qk_norm ||
          c.attention_window != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            MixerKindName(c.kind),
            " attention takes no head_dim, biases, q/k norms, rotary positions or attention "
            "window: only standard does"));
      }
      if (c.d_model % c.num_heads != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "d_model (", c.d_model, ") must be a multiple of num_heads (", c.num_heads, ")"));
      }
      return absl::OkStatus();
    case MixerKind::kMamba:
      for (auto [field, value] : {std::pair<const char*, int64_t>{"d_state", c.d_state},
                                  {"d_conv", c.d_conv},
                                  {"expand", c.expand}}) {
        if (auto s = positive(field, value); !s.ok()) return s;
      }
      if (!(c.bcdt_rms_epsilon >= 0)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the dt/B/C RMSNorm epsilon must be >= 0 (0: none), got ", c.bcdt_rms_epsilon));
      }
      if (c.dt_rank < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("dt_rank must be >= 0 (0: ceil(d_model / 16)), got ", c.dt_rank));
      }
      if (c.mamba_heads < 1 || c.d_inner() % c.mamba_heads != 0) {
        return absl::InvalidArgumentError(absl::StrCat("mamba heads (", c.mamba_heads,
                                                       ") must be >= 1 and divide d_inner (",
                                                       c.d_inner(), ")"));
      }
      return absl::OkStatus();
    case MixerKind::kMamba2:
      return ValidateMamba2Config(c);
    case MixerKind::kShortConv:
      if (!c.causal) return absl::InvalidArgumentError("short_conv is causal; set causal = true");
      return positive("d_conv", c.d_conv);
    case MixerKind::kNone:
      return absl::OkStatus();
    case MixerKind::kRwkv:
      if (!c.causal) {
        return absl::InvalidArgumentError(
            "rwkv is causal: its recurrence runs forward in time; set causal = true");
      }
      for (auto [field, value] : {std::pair<const char*, int64_t>{"ffn_dim", c.ffn_dim},
                                  {"rwkv_attention_dim", c.rwkv_attention_dim}}) {
        if (value < 0) {
          return absl::InvalidArgumentError(
              absl::StrCat(field, " must be >= 0 (0: its default), got ", value));
        }
      }
      if (!(c.norm_epsilon > 0)) {
        return absl::InvalidArgumentError(
            absl::StrCat("norm_epsilon must be > 0, got ", c.norm_epsilon));
      }
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError("unknown mixer kind");
}

std::vector<WeightSpec> ExpectedWeights(const MixerConfig& config) {
  switch (config.kind) {
    case MixerKind::kStandard:
      return ExpectedStandardWeights(config);
    case MixerKind::kLinformer:
      return ExpectedLinformerWeights(config);
    case MixerKind::kLinear:
      return ExpectedLinearWeights(config);
    case MixerKind::kMamba:
      return ExpectedMambaWeights(config);
    case MixerKind::kMamba2:
      return ExpectedMamba2Weights(config);
    case MixerKind::kSlidingWindow:
    case MixerKind::kPerformer:
    case MixerKind::kSparse:
      return ExpectedStandardWeights(config);  // the same four projections
    case MixerKind::kRwkv:
      return ExpectedRwkvWeights(config);
    case MixerKind::kShortConv:
      return ExpectedShortConvWeights(config);
    case MixerKind::kNone:
      return {};
  }
  return {};
}

WeightMap RandomWeights(const MixerConfig& config, uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  switch (config.kind) {
    case MixerKind::kStandard:
      return RandomStandardWeights(config, gen);
    case MixerKind::kLinformer:
      return RandomLinformerWeights(config, gen);
    case MixerKind::kLinear:
      return RandomLinearWeights(config, gen);
    case MixerKind::kMamba:
      return RandomMambaWeights(config, gen);
    case MixerKind::kMamba2:
      return RandomMamba2Weights(config, gen);
    case MixerKind::kSlidingWindow:
    case MixerKind::kPerformer:
    case MixerKind::kSparse:
      return RandomStandardWeights(config, gen);
    case MixerKind::kRwkv:
      return RandomRwkvWeights(config, gen);
    case MixerKind::kShortConv:
      return RandomShortConvWeights(config, gen);
    case MixerKind::kNone:
      return {};
  }
  return {};
}

int64_t MixerState::SharedLength() const {
  int64_t length = 0;
  for (const KvSegment& s : shared) length += s.length;
  return length;
}

int64_t MixerState::Bytes() const {
  int64_t bytes = 0;
  for (const at::Tensor& t : tensors) {
    if (t.defined()) bytes += t.numel() * static_cast<int64_t>(t.element_size());
  }
  // A segment keeps its whole buffer alive (a cache that grew by doubling: up to twice its
  // length), so the whole buffer is counted.
  for (const KvSegment& s : shared) {
    for (const at::Tensor* t : {&s.k, &s.v}) {
      if (t->defined()) bytes += t->numel() * static_cast<int64_t>(t->element_size());
    }
  }
  return bytes;
}

MixerState MixerState::Clone() const {
  MixerState copy;
  copy.position = position;
  copy.shared = shared;
  for (const at::Tensor& t : tensors) copy.tensors.push_back(t.defined() ? t.clone() : t);
  return copy;
}

absl::Status CheckStepBatch(const at::Tensor& x_t, const std::vector<MixerState*>& states,
                            int64_t d_model, at::Device device) {
  if (absl::Status s = CheckFloatTensor(x_t, "StepBatch input x_t", {-1, d_model}, device);
      !s.ok()) {
    return s;
  }
  if (static_cast<int64_t>(states.size()) != x_t.size(0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("StepBatch: ", x_t.size(0), " rows but ", states.size(), " states"));
  }
  for (size_t i = 0; i < states.size(); ++i) {
    if (states[i] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("StepBatch: state ", i, " is null"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<at::Tensor> Mixer::StepBatch(const at::Tensor& x_t,
                                            const std::vector<MixerState*>& states) const {
  if (absl::Status s = CheckStepBatch(x_t, states, config().d_model, x_t.device()); !s.ok()) {
    return s;
  }
  if (StatesStack(states, StepReadsPosition())) return StepBatchByGather(*this, x_t, states);
  std::vector<at::Tensor> rows;
  rows.reserve(states.size());
  for (size_t i = 0; i < states.size(); ++i) {
    absl::StatusOr<at::Tensor> y = Step(x_t.narrow(0, static_cast<int64_t>(i), 1), states[i]);
    if (!y.ok()) return y.status();
    rows.push_back(*std::move(y));
  }
  return GuardTorch("StepBatch", [&]() -> absl::StatusOr<at::Tensor> { return at::cat(rows); });
}

bool StatesStack(const std::vector<MixerState*>& states, bool equal_positions) {
  if (states.size() < 2) return false;
  const MixerState& first = *states.front();
  for (const MixerState* s : states) {
    if (s->tensors.size() != first.tensors.size() || !s->shared.empty()) return false;
    if (equal_positions && s->position != first.position) return false;
    for (size_t j = 0; j < first.tensors.size(); ++j) {
      const at::Tensor& a = s->tensors[j];
      const at::Tensor& b = first.tensors[j];
      if (!a.defined() || a.dim() < 1 || a.size(0) != 1 || a.sizes() != b.sizes() ||
          a.scalar_type() != b.scalar_type() || a.device() != b.device()) {
        return false;
      }
    }
  }
  return true;
}

absl::StatusOr<at::Tensor> StepBatchByGather(const Mixer& mixer, const at::Tensor& x_t,
                                             const std::vector<MixerState*>& states) {
  if (absl::Status s = CheckStepBatch(x_t, states, mixer.config().d_model, x_t.device()); !s.ok()) {
    return s;
  }
  if (states.size() == 1) return mixer.Step(x_t, states.front());  // nothing to gather
  if (!StatesStack(states, mixer.StepReadsPosition())) {
    return absl::InvalidArgumentError("StepBatchByGather: the states do not stack");
  }
  return GuardTorch("StepBatch (gathered)", [&]() -> absl::StatusOr<at::Tensor> {
    MixerState batch;
    batch.position = states.front()->position;  // all equal, or not read by Step
    for (size_t j = 0; j < states.front()->tensors.size(); ++j) {
      std::vector<at::Tensor> rows;
      for (const MixerState* s : states) rows.push_back(s->tensors[j]);
      batch.tensors.push_back(at::cat(rows));
    }
    absl::StatusOr<at::Tensor> y = mixer.Step(x_t, &batch);
    if (!y.ok()) return y.status();
    for (size_t i = 0; i < states.size(); ++i) {
      MixerState& s = *states[i];
      for (size_t j = 0; j < s.tensors.size(); ++j) {
        const at::Tensor row = batch.tensors[j].narrow(0, static_cast<int64_t>(i), 1);
        if (row.sizes() == s.tensors[j].sizes()) {
          s.tensors[j].copy_(row);
        } else {
          s.tensors[j] = row.clone();
        }
      }
      s.position += 1;
    }
    return *std::move(y);
  });
}

absl::StatusOr<std::unique_ptr<Mixer>> CreateMixer(const MixerConfig& config, WeightMap weights) {
  if (auto s = ValidateMixerConfig(config); !s.ok()) return s;
  std::set<std::string> expected_names;
  // Every weight on one device: the CPU, or the CUDA device the model moved them to (the
  // first expected tensor's).
  at::Device device(at::kCPU);
  for (const WeightSpec& spec : ExpectedWeights(config)) {
    auto it = weights.find(spec.name);
    if (it != weights.end() && it->second.defined()) {
      device = it->second.device();
      break;
    }
  }
  for (const WeightSpec& spec : ExpectedWeights(config)) {
    expected_names.insert(spec.name);
    auto it = weights.find(spec.name);
    if (it == weights.end()) {
      return absl::InvalidArgumentError(absl::StrCat(MixerKindName(config.kind),
                                                     " mixer: missing tensor '", spec.name,
                                                     "' of shape ", ShapeString(spec.shape)));
    }
    at::Tensor& t = it->second;
    if (!t.defined() || t.scalar_type() != at::kFloat || t.device() != device ||
        t.sizes() != at::IntArrayRef(spec.shape)) {
      // The device only when it is the one that differs (messages stay short otherwise).
      const bool misplaced = t.defined() && t.device() != device;
      return absl::InvalidArgumentError(absl::StrCat(
          MixerKindName(config.kind), " mixer: tensor '", spec.name, "' expected float32 ",
          ShapeString(spec.shape), misplaced ? " on " + device.str() : "", ", got ",
          t.defined() ? DTypeName(t.scalar_type()) : "undefined", " ",
          t.defined() ? ShapeString(t.sizes()) : "()", misplaced ? " on " + t.device().str() : ""));
    }
    t = t.contiguous();
  }
  for (const auto& [name, tensor] : weights) {
    if (!expected_names.count(name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          MixerKindName(config.kind), " mixer: unexpected tensor '", name, "' ",
          ShapeString(tensor.sizes()), "; expected only ", absl::StrJoin(expected_names, ", ")));
    }
  }
  return GuardTorch("CreateMixer", [&]() -> absl::StatusOr<std::unique_ptr<Mixer>> {
    switch (config.kind) {
      case MixerKind::kStandard:
        return CreateStandardMixer(config, weights);
      case MixerKind::kLinformer:
        return CreateLinformerMixer(config, weights);
      case MixerKind::kLinear:
        return CreateLinearMixer(config, weights);
      case MixerKind::kMamba:
        return CreateMambaMixer(config, weights);
      case MixerKind::kMamba2:
        return CreateMamba2Mixer(config, weights);
      case MixerKind::kSlidingWindow:
        return CreateSlidingWindowMixer(config, weights);
      case MixerKind::kPerformer:
        return CreatePerformerMixer(config, weights);
      case MixerKind::kRwkv:
        return CreateRwkvMixer(config, weights);
      case MixerKind::kSparse:
        return CreateSparseMixer(config, weights);
      case MixerKind::kShortConv:
        return CreateShortConvMixer(config, weights);
      case MixerKind::kNone:
        return CreateNoMixer(config);
    }
    return absl::InvalidArgumentError("unknown mixer kind");
  });
}

}  // namespace attnserve::kernels

#include "kernels/rwkv/rwkv_block.h"

#include <ATen/ATen.h>

#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/common/linear.h"
#include "kernels/common/status_macros.h"
#include "kernels/common/tensor_checks.h"
#include "kernels/rwkv/wkv_cpu.h"
#if defined(ATTNSERVE_WITH_CUDA_TORCH)
#include "kernels/rwkv/rwkv_cuda_torch.h"
#endif

namespace attnserve::kernels {

at::Tensor WkvCpu(const at::Tensor& k, const at::Tensor& v, const at::Tensor& decay,
                  const at::Tensor& first, float* state, float* const* row_states) {
  at::Tensor out = at::empty({k.size(0), k.size(1), k.size(2)}, k.options());
  rwkv::WkvParams p;
  p.batch = k.size(0);
  p.seqlen = k.size(1);
  p.channels = k.size(2);
  p.k = k.data_ptr<float>();
  p.v = v.data_ptr<float>();
  p.k_batch_stride = k.stride(0);
  p.k_seq_stride = k.stride(1);
  p.v_batch_stride = v.stride(0);
  p.v_seq_stride = v.stride(1);
  p.w = decay.data_ptr<float>();
  p.u = first.data_ptr<float>();
  p.out = out.data_ptr<float>();
  p.state = state;
  p.row_states = row_states;
  rwkv::WkvCpu(p);
  return out;
}

namespace {

constexpr float kFreshMaximum = -1e38f;  // p of a fresh state, as Hugging Face's

// x (…, H) mixed with its shifted copy s: s + μ(x - s) = μx + (1-μ)s.
at::Tensor TimeMix(const at::Tensor& x, const at::Tensor& shifted, const at::Tensor& mu) {
  return at::addcmul(shifted, x - shifted, mu);
}

// σ(x) = 1 / (1 + e^-x) elementwise. at::sigmoid rounds the last elements of a tensor whose
// size is not a multiple of its vector width differently (a scalar tail), so a decode row of
// width A or H not a multiple of 16 got other bits in a batch than alone; e^x, + and 1/x
// round every element alike.
at::Tensor Sigmoid(const at::Tensor& x) { return at::neg(x).exp_().add_(1.0).reciprocal_(); }

// x (B, L, H) shifted one token along L, the first row taken from prev (B, H).
at::Tensor Shift(const at::Tensor& x, const at::Tensor& prev) {
  if (x.size(1) == 1) return prev.unsqueeze(1);
  return at::cat({prev.unsqueeze(1), x.narrow(1, 0, x.size(1) - 1)}, 1);
}

class RwkvMixer final : public Mixer {
 public:
  RwkvMixer(const MixerConfig& config, const WeightMap& w)
      : config_(config),
        attention_dim_(config.resolved_rwkv_attention_dim()),
        ln1_weight_(w.at("ln1.weight")),
        ln1_bias_(w.at("ln1.bias")),
        ln2_weight_(w.at("ln2.weight")),
        ln2_bias_(w.at("ln2.bias")),
        decay_((-at::exp(w.at("attention.time_decay"))).contiguous()),
        first_(w.at("attention.time_first").contiguous()),
        att_mix_k_(w.at("attention.time_mix_key").view({config.d_model})),
        att_mix_v_(w.at("attention.time_mix_value").view({config.d_model})),
        att_mix_r_(w.at("attention.time_mix_receptance").view({config.d_model})),
        key_(w.at("attention.key.weight"), config.weight_format),
        value_(w.at("attention.value.weight"), config.weight_format),
        receptance_(w.at("attention.receptance.weight"), config.weight_format),
        output_(w.at("attention.output.weight"), config.weight_format),
        ffn_mix_k_(w.at("feed_forward.time_mix_key").view({config.d_model})),
        ffn_mix_r_(w.at("feed_forward.time_mix_receptance").view({config.d_model})),
        ffn_key_(w.at("feed_forward.key.weight"), config.weight_format),
        ffn_receptance_(w.at("feed_forward.receptance.weight"), config.weight_format),
        ffn_value_(w.at("feed_forward.value.weight"), config.weight_format) {}

  const MixerConfig& config() const override { return config_; }
  bool can_stream() const override { return true; }
  bool StepReadsPosition() const override { return false; }

  absl::StatusOr<MixerState> InitialState(int64_t batch) const override {
    RETURN_IF_ERROR(CheckDevice("InitialState"));
    if (batch <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("batch must be > 0, got ", batch));
    }
    return GuardTorch("rwkv InitialState", [&]() -> absl::StatusOr<MixerState> {
      const at::TensorOptions options = at::TensorOptions(at::kFloat).device(device());
      at::Tensor wkv = at::zeros({batch, 3, attention_dim_}, options);
      wkv.select(1, 2).fill_(kFreshMaximum);
      MixerState state;
      state.tensors = {at::zeros({batch, config_.d_model}, options), wkv,
                       at::zeros({batch, config_.d_model}, options)};
      return state;
    });
  }

  absl::StatusOr<at::Tensor> Prefill(const at::Tensor& x, MixerState* state) const override {
    RETURN_IF_ERROR(CheckDevice("Prefill"));
    RETURN_IF_ERROR(CheckFloatTensor(x, "rwkv input x", {-1, -1, config_.d_model}, device()));
    if (x.size(1) == 0) return absl::InvalidArgumentError("rwkv input x: sequence is empty");
    if (state != nullptr) RETURN_IF_ERROR(CheckState(*state, x.size(0)));
    return GuardTorch("rwkv Prefill", [&]() -> absl::StatusOr<at::Tensor> {
      if (state != nullptr) return Forward(x, state);
      ASSIGN_OR_RETURN(MixerState fresh, InitialState(x.size(0)));
      return Forward(x, &fresh);
    });
  }

  absl::StatusOr<at::Tensor> Step(const at::Tensor& x_t, MixerState* state) const override {
    RETURN_IF_ERROR(CheckDevice("Step"));
    RETURN_IF_ERROR(CheckFloatTensor(x_t, "rwkv step input x_t", {-1, config_.d_model}, device()));
    if (state == nullptr) return absl::InvalidArgumentError("rwkv Step needs a state");
    RETURN_IF_ERROR(CheckState(*state, x_t.size(0)));
    return GuardTorch("rwkv Step", [&]() -> absl::StatusOr<at::Tensor> {
      return Forward(x_t.unsqueeze(1), state).squeeze(1);
    });
  }

  // Every state is checked first; the projections run once over the B rows (each weight read
  // once), the WKV kernel updates each row's state where it lives (row_states), and the two
  // token-shift rows (H floats each) are gathered and written back.
  // CUDA states: Mixer's default, which stacks them (they always stack) into one batched step.
  absl::StatusOr<at::Tensor> StepBatch(const at::Tensor& x_t,
                                       const std::vector<MixerState*>& states) const override {
    RETURN_IF_ERROR(CheckDevice("StepBatch"));
    if (!device().is_cpu()) {
      for (const MixerState* state : states) {
        if (state != nullptr) RETURN_IF_ERROR(CheckState(*state, 1));
      }
      return Mixer::StepBatch(x_t, states);
    }
    RETURN_IF_ERROR(CheckStepBatch(x_t, states, config_.d_model, at::kCPU));
    for (const MixerState* state : states) RETURN_IF_ERROR(CheckState(*state, 1));
    return GuardTorch("rwkv StepBatch", [&]() -> absl::StatusOr<at::Tensor> {
      std::vector<at::Tensor> att_rows, ffn_rows;
      std::vector<float*> wkv_rows;
      for (MixerState* state : states) {
        att_rows.push_back(state->tensors[0]);
        wkv_rows.push_back(state->tensors[1].data_ptr<float>());
        ffn_rows.push_back(state->tensors[2]);
      }
      Shifts shifts{at::cat(att_rows), at::cat(ffn_rows)};
      at::Tensor y = Forward(x_t.unsqueeze(1), shifts, at::Tensor(), wkv_rows.data()).squeeze(1);
      for (size_t i = 0; i < states.size(); ++i) {
        states[i]->tensors[0].copy_(shifts.att.narrow(0, static_cast<int64_t>(i), 1));
        states[i]->tensors[2].copy_(shifts.ffn.narrow(0, static_cast<int64_t>(i), 1));
        states[i]->position += 1;
      }
      return y;
    });
  }

  int64_t StateBytesPerSequence(int64_t) const override {
    return (2 * config_.d_model + 3 * attention_dim_) * static_cast<int64_t>(sizeof(float));
  }

 private:
  at::Device device() const { return key_.device(); }

  absl::Status CheckDevice(const char* what) const {
#if defined(ATTNSERVE_WITH_CUDA_TORCH)
    if (device().is_cpu() || device().is_cuda()) return absl::OkStatus();
#else
    if (device().is_cpu()) return absl::OkStatus();
#endif
    return absl::FailedPreconditionError(absl::StrCat(
        "rwkv ", what, ": weights on ", device().str(), ", which this build has no kernel for"));
  }

  absl::Status CheckState(const MixerState& state, int64_t batch) const {
    if (state.tensors.size() != 3) {
      return absl::InvalidArgumentError(
          absl::StrCat("rwkv state: expected 3 tensors (time shift, wkv, channel shift), got ",
                       state.tensors.size()));
    }
    RETURN_IF_ERROR(CheckFloatTensor(state.tensors[0], "rwkv time-mixing shift",
                                     {batch, config_.d_model}, device()));
    RETURN_IF_ERROR(
        CheckFloatTensor(state.tensors[1], "rwkv wkv state", {batch, 3, attention_dim_}, device()));
    RETURN_IF_ERROR(CheckFloatTensor(state.tensors[2], "rwkv channel-mixing shift",
                                     {batch, config_.d_model}, device()));
    if (!state.tensors[1].is_contiguous()) {
      return absl::InvalidArgumentError("rwkv wkv state must be contiguous");
    }
    return absl::OkStatus();
  }

  // The token-shift states (B, H): the last ln1 and ln2 outputs.
  struct Shifts {
    at::Tensor att, ffn;
  };

  // x (B, L, H) -> y - x (B, L, H); `state` is continued in place and its position advanced.
  at::Tensor Forward(const at::Tensor& x, MixerState* state) const {
    Shifts shifts{state->tensors[0], state->tensors[2]};
    at::Tensor y = Forward(x, shifts, state->tensors[1], nullptr);
    state->position += x.size(1);
    return y;
  }

  // The block over x (B, L, H) continuing from `shifts` (updated in place) and the WKV state:
  // `wkv_state` (B, 3, A) or, when it is undefined, one (3, A) state per row (`wkv_rows`, CPU
  // only).
  at::Tensor Forward(const at::Tensor& x, Shifts& shifts, const at::Tensor& wkv_state,
                     float* const* wkv_rows) const {
    const int64_t len = x.size(1), h = config_.d_model;
    const double eps = config_.norm_epsilon;
    // Time mixing.
    const at::Tensor xa = at::layer_norm(x, {h}, ln1_weight_, ln1_bias_, eps);
    const at::Tensor xs = Shift(xa, shifts.att);
    const at::Tensor k = key_(TimeMix(xa, xs, att_mix_k_)).contiguous();
    const at::Tensor v = value_(TimeMix(xa, xs, att_mix_v_)).contiguous();
    const at::Tensor r = Sigmoid(receptance_(TimeMix(xa, xs, att_mix_r_)));
    const at::Tensor wkv = Wkv(k, v, wkv_state, wkv_rows);
    const at::Tensor att = output_(r * wkv);
    // Channel mixing, on the residual stream after time mixing.
    const at::Tensor xf = at::layer_norm(x + att, {h}, ln2_weight_, ln2_bias_, eps);
    const at::Tensor xg = Shift(xf, shifts.ffn);
    const at::Tensor hidden = at::relu(ffn_key_(TimeMix(xf, xg, ffn_mix_k_))).square_();
    const at::Tensor ffn =
        Sigmoid(ffn_receptance_(TimeMix(xf, xg, ffn_mix_r_))) * ffn_value_(hidden);
    shifts.att.copy_(xa.select(1, len - 1));
    shifts.ffn.copy_(xf.select(1, len - 1));
    return att + ffn;
  }

  at::Tensor Wkv(const at::Tensor& k, const at::Tensor& v, const at::Tensor& wkv_state,
                 float* const* wkv_rows) const {
    if (k.is_cuda()) {
#if defined(ATTNSERVE_WITH_CUDA_TORCH)
      return rwkv::WkvCuda(k, v, decay_, first_, wkv_state);
#else
      TORCH_CHECK(false, "rwkv: a CUDA tensor reached a build without CUDA kernels");
#endif
    }
    return WkvCpu(k, v, decay_, first_, wkv_state.defined() ? wkv_state.data_ptr<float>() : nullptr,
                  wkv_rows);
  }

  const MixerConfig config_;
  const int64_t attention_dim_;
  const at::Tensor ln1_weight_, ln1_bias_, ln2_weight_, ln2_bias_;
  // decay_ = -exp(time_decay) (A), first_ = time_first (A); the μ's flattened to (H).
  const at::Tensor decay_, first_, att_mix_k_, att_mix_v_, att_mix_r_;
  const LinearWeight key_, value_, receptance_, output_;
  const at::Tensor ffn_mix_k_, ffn_mix_r_;
  const LinearWeight ffn_key_, ffn_receptance_, ffn_value_;
};

}  // namespace

std::vector<WeightSpec> ExpectedRwkvWeights(const MixerConfig& c) {
  const int64_t h = c.d_model, a = c.resolved_rwkv_attention_dim(), f = c.resolved_ffn_dim();
  return {{"ln1.weight", {h}},
          {"ln1.bias", {h}},
          {"ln2.weight", {h}},
          {"ln2.bias", {h}},
          {"attention.time_decay", {a}},
          {"attention.time_first", {a}},
          {"attention.time_mix_key", {1, 1, h}},
          {"attention.time_mix_value", {1, 1, h}},
          {"attention.time_mix_receptance", {1, 1, h}},
          {"attention.key.weight", {a, h}},
          {"attention.value.weight", {a, h}},
          {"attention.receptance.weight", {a, h}},
          {"attention.output.weight", {h, a}},
          {"feed_forward.time_mix_key", {1, 1, h}},
          {"feed_forward.time_mix_receptance", {1, 1, h}},
          {"feed_forward.key.weight", {f, h}},
          {"feed_forward.receptance.weight", {h, h}},
          {"feed_forward.value.weight", {h, f}}};
}

// Hugging Face's RwkvPreTrainedModel initialisation of the time-mixing parameters for a layer
// half-way down the stack (ratio_0_to_1 = 0.5: the mixer does not know its depth): decay
// speeds from -5 to 3 across channels, time_first log(0.3) with a zigzag, μ = (i/H)^0.5; the
// matrices uniform in ±1/√fan_in.
WeightMap RandomRwkvWeights(const MixerConfig& c, at::Generator& gen) {
  const int64_t h = c.d_model, a = c.resolved_rwkv_attention_dim(), f = c.resolved_ffn_dim();
  const double ratio = 0.5;
  auto uniform = [&](std::vector<int64_t> shape, double bound) {
    return at::empty(shape, at::kFloat).uniform_(-bound, bound, gen);
  };
  const at::Tensor channel = at::arange(a, at::kDouble) / std::max<int64_t>(1, a - 1);
  const at::Tensor position = (at::arange(h, at::kDouble) / h).view({1, 1, h});
  WeightMap w;
  w["ln1.weight"] = at::ones({h});
  w["ln1.bias"] = at::zeros({h});
  w["ln2.weight"] = at::ones({h});
  w["ln2.bias"] = at::zeros({h});
  w["attention.time_decay"] = (-5 + 8 * at::pow(channel, 0.7 + 1.3 * ratio)).to(at::kFloat);
  const at::Tensor zigzag = (at::remainder(at::arange(1, a + 1, at::kDouble), 3) - 1) * 0.5;
  w["attention.time_first"] = (std::log(0.3) + zigzag).to(at::kFloat);
  w["attention.time_mix_key"] = at::pow(position, 1 - ratio).to(at::kFloat);
  w["attention.time_mix_value"] = (at::pow(position, 1 - ratio) + 0.3 * ratio).to(at::kFloat);
  w["attention.time_mix_receptance"] = at::pow(position, 0.5 * (1 - ratio)).to(at::kFloat);
  w["attention.key.weight"] = uniform({a, h}, 1.0 / std::sqrt(h));
  w["attention.value.weight"] = uniform({a, h}, 1.0 / std::sqrt(h));
  w["attention.receptance.weight"] = uniform({a, h}, 1.0 / std::sqrt(h));
  w["attention.output.weight"] = uniform({h, a}, 1.0 / std::sqrt(a));
  w["feed_forward.time_mix_key"] = at::pow(position, 1 - ratio).to(at::kFloat);
  w["feed_forward.time_mix_receptance"] = at::pow(position, 1 - ratio).to(at::kFloat);
  w["feed_forward.key.weight"] = uniform({f, h}, 1.0 / std::sqrt(h));
  w["feed_forward.receptance.weight"] = uniform({h, h}, 1.0 / std::sqrt(h));
  w["feed_forward.value.weight"] = uniform({h, f}, 1.0 / std::sqrt(f));
  return w;
}

std::unique_ptr<Mixer> CreateRwkvMixer(const MixerConfig& config, const WeightMap& weights) {
  return std::make_unique<RwkvMixer>(config, weights);
}

}  // namespace attnserve::kernels

#include "kernels/performer/performer_attention.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/common/attention_projections.h"
#include "kernels/common/status_macros.h"
#include "kernels/common/tensor_checks.h"
#include "kernels/linear/causal_linear_attention_cpu.h"
#include "kernels/linear/linear_attention.h"
#include "kernels/performer/favor_features_cpu.h"

namespace attnserve::kernels {

at::Tensor PerformerFeatureMatrix(const MixerConfig& config) {
  const int64_t d = config.head_dim();
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(config.performer_seed);
  const at::Tensor gaussian = at::normal(0.0, 1.0, {d, d}, gen, at::kDouble);
  auto [q_factor, r_factor] = at::linalg_qr(gaussian);
  // Signs from R's diagonal, so that Q is uniformly distributed (Haar): without them a
  // Householder QR ties each column's sign to the data and biases the directions.
  const at::Tensor q = q_factor * at::sign(at::diagonal(r_factor)).unsqueeze(0);
  const at::Tensor norms = at::normal(0.0, 1.0, {d, d}, gen, at::kDouble).norm(2, 1);
  return (q.transpose(0, 1) * norms.unsqueeze(1)).to(at::kFloat).contiguous();
}

namespace {

// ω x̂ (..., m) and x̂ (..., d) for x (..., d).
std::pair<at::Tensor, at::Tensor> Project(const at::Tensor& x, const at::Tensor& omega) {
  const at::Tensor xs = x / std::pow(static_cast<double>(x.size(-1)), 0.25);
  return {at::matmul(xs, omega.to(x.scalar_type()).transpose(0, 1)), xs};
}

}  // namespace

at::Tensor FavorPlusFeatures(const at::Tensor& x, const at::Tensor& omega) {
  auto [projected, xs] = Project(x, omega);
  const at::Tensor half_norm = xs.pow(2).sum(-1, /*keepdim=*/true).mul_(0.5);
  return projected.sub_(half_norm).exp_().div_(std::sqrt(static_cast<double>(omega.size(0))));
}

at::Tensor FavorPlusQueryFeatures(const at::Tensor& x, const at::Tensor& omega) {
  at::Tensor projected = Project(x, omega).first;
  return projected.sub_(std::get<0>(projected.max(-1, /*keepdim=*/true))).exp_();
}

namespace {

class PerformerMixer final : public Mixer {
 public:
  PerformerMixer(const MixerConfig& config, AttentionProjections projections)
      : config_(config),
        projections_(std::move(projections)),
        omega_(PerformerFeatureMatrix(config).to(projections_.device())) {}

  const MixerConfig& config() const override { return config_; }
  bool can_stream() const override { return config_.causal; }
  bool StepReadsPosition() const override { return false; }

  absl::StatusOr<MixerState> InitialState(int64_t batch) const override {
    RETURN_IF_ERROR(CheckUsable("InitialState", /*stream=*/true));
    if (batch <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("batch must be > 0, got ", batch));
    }
    return GuardTorch("performer InitialState", [&]() -> absl::StatusOr<MixerState> {
      return ZeroLinearAttentionState(batch, config_.num_heads, config_.head_dim(), device());
    });
  }

  absl::StatusOr<at::Tensor> Prefill(const at::Tensor& x, MixerState* state) const override {
    RETURN_IF_ERROR(CheckUsable("Prefill with a state", state != nullptr));
    RETURN_IF_ERROR(CheckFloatTensor(x, "x", {-1, -1, config_.d_model}, device()));
    if (state != nullptr) RETURN_IF_ERROR(CheckState(*state, x.size(0)));
    return GuardTorch("performer Prefill", [&]() -> absl::StatusOr<at::Tensor> {
      auto [q, k, v] = projections_.ProjectQkv(x, config_.num_heads);
      const at::Tensor fq = FavorPlusQueryFeatures(q, omega_), fk = FavorPlusFeatures(k, omega_);
      if (state == nullptr && !config_.causal) {
        ASSIGN_OR_RETURN(at::Tensor heads, LinearAttentionOnFeaturesCpu(fq, fk, v, false));
        return projections_.ProjectOutput(heads);
      }
      const int64_t b = x.size(0), h = config_.num_heads, d = config_.head_dim();
      const at::TensorOptions options = at::TensorOptions(at::kFloat).device(device());
      const at::Tensor s = state != nullptr ? state->tensors[0] : at::zeros({b, h, d, d}, options);
      const at::Tensor z = state != nullptr ? state->tensors[1] : at::zeros({b, h, d}, options);
      ASSIGN_OR_RETURN(LinearAttentionResult r,
                       CausalLinearAttentionOnDevice(fq, fk, v, s, z, /*map_features=*/false));
      if (state != nullptr) {
        state->tensors = {std::move(r.s), std::move(r.z)};
        state->position += x.size(1);
      }
      return projections_.ProjectOutput(r.out);
    });
  }

  absl::StatusOr<at::Tensor> Step(const at::Tensor& x_t, MixerState* state) const override {
    RETURN_IF_ERROR(CheckUsable("Step", /*stream=*/true));
    RETURN_IF_ERROR(CheckFloatTensor(x_t, "x_t", {-1, config_.d_model}, device()));
    if (state == nullptr) return absl::InvalidArgumentError("Step needs a state, got null");
    RETURN_IF_ERROR(CheckState(*state, x_t.size(0)));
    return GuardTorch("performer Step", [&]() -> absl::StatusOr<at::Tensor> {
      const int64_t b = x_t.size(0);
      if (x_t.is_cpu()) {  // in place, the same kernels as StepBatch
        std::vector<LinearDecodeRow> rows;
        for (int64_t i = 0; i < b; ++i) rows.push_back(LinearStateRow(*state, i));
        state->position += 1;
        return DecodeCpu(x_t, rows);
      }
      auto [q, k, v] = projections_.ProjectQkv(x_t.unsqueeze(1), config_.num_heads);
      const at::Tensor fq = FavorPlusQueryFeatures(q.squeeze(2), omega_);
      const at::Tensor fk = FavorPlusFeatures(k.squeeze(2), omega_);
      ASSIGN_OR_RETURN(LinearAttentionResult r,
                       CausalLinearAttentionStepOnDevice(fq, fk, v.squeeze(2), state->tensors[0],
                                                         state->tensors[1],
                                                         /*map_features=*/false));
      state->tensors = {std::move(r.s), std::move(r.z)};
      state->position += 1;
      return projections_.ProjectOutput(r.out.unsqueeze(2)).view({b, config_.d_model});
    });
  }

  // Every state checked before any changes. CPU: the decode kernels on every row's state
  // where it lives (DecodeCpu); CUDA: one batched Step over the gathered states (they stack:
  // fixed shapes).
  absl::StatusOr<at::Tensor> StepBatch(const at::Tensor& x_t,
                                       const std::vector<MixerState*>& states) const override {
    RETURN_IF_ERROR(CheckUsable("StepBatch", /*stream=*/true));
    RETURN_IF_ERROR(CheckStepBatch(x_t, states, config_.d_model, device()));
    for (const MixerState* state : states) RETURN_IF_ERROR(CheckState(*state, 1));
    if (!x_t.is_cpu()) return StepBatchByGather(*this, x_t, states);
    return GuardTorch("performer StepBatch", [&]() -> absl::StatusOr<at::Tensor> {
      std::vector<LinearDecodeRow> rows;
      for (MixerState* state : states) {
        rows.push_back(LinearStateRow(*state, 0));
        state->position += 1;
      }
      return DecodeCpu(x_t, rows);
    });
  }

  int64_t StateBytesPerSequence(int64_t) const override {
    if (!config_.causal) return 0;
    const int64_t h = config_.num_heads, d = config_.head_dim();
    return h * (d * d + d) * static_cast<int64_t>(sizeof(float));
  }

 private:
  at::Device device() const { return projections_.device(); }

  absl::Status CheckUsable(const char* operation, bool stream) const {
#if defined(ATTNSERVE_WITH_CUDA_TORCH)
    const bool has_kernels = device().is_cpu() || device().is_cuda();
#else
    const bool has_kernels = device().is_cpu();
#endif
    if (!has_kernels) {
      return absl::FailedPreconditionError(absl::StrCat("performer: weights on ", device().str(),
                                                        ", which this build has no kernel for"));
    }
    if (stream && !config_.causal) {
      return absl::FailedPreconditionError(
          absl::StrCat("performer is bidirectional (causal=false): it cannot stream; ", operation,
                       " is not available. Call Prefill with a null state on the whole sequence"));
    }
    return absl::OkStatus();
  }

  absl::Status CheckState(const MixerState& state, int64_t batch) const {
    const int64_t h = config_.num_heads, d = config_.head_dim();
    if (state.tensors.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("performer state: expected 2 tensors (S, z), got ", state.tensors.size()));
    }
    RETURN_IF_ERROR(
        CheckFloatTensor(state.tensors[0], "performer state S", {batch, h, d, d}, device()));
    return CheckFloatTensor(state.tensors[1], "performer state z", {batch, h, d}, device());
  }

  // x_t (B, D) -> (B, D) on the CPU: q, k, v of the B rows in one product, the FAVOR+
  // features of each (row, head) on their own, then the decode kernel on rows[b] in place.
  at::Tensor DecodeCpu(const at::Tensor& x_t, const std::vector<LinearDecodeRow>& rows) const {
    const int64_t b = x_t.size(0), h = config_.num_heads, d = config_.head_dim();
    auto [q, k, v] = projections_.ProjectQkv(x_t.unsqueeze(1), h);  // (B, H, 1, d) contiguous
    at::Tensor fq = at::empty_like(q), fk = at::empty_like(k);
    FavorPlusRowFeaturesCpu(q.data_ptr<float>(), b * h, d, omega_.data_ptr<float>(), d,
                            /*query=*/true, fq.data_ptr<float>());
    FavorPlusRowFeaturesCpu(k.data_ptr<float>(), b * h, d, omega_.data_ptr<float>(), d,
                            /*query=*/false, fk.data_ptr<float>());
    const at::Tensor heads = LinearDecodeOnRowsCpu(fq, fk, v, rows, /*map_features=*/false);
    return projections_.ProjectOutput(heads).view({b, config_.d_model});
  }

  const MixerConfig config_;
  const AttentionProjections projections_;
  const at::Tensor omega_;  // (m, d), m = d, contiguous
};

}  // namespace

std::unique_ptr<Mixer> CreatePerformerMixer(const MixerConfig& config, const WeightMap& weights) {
  return std::make_unique<PerformerMixer>(
      config, AttentionProjections::FromWeights(weights, config.weight_format));
}

}  // namespace attnserve::kernels

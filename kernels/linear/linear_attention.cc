#include "kernels/linear/linear_attention.h"

#include <ATen/ATen.h>

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/common/attention_projections.h"
#include "kernels/common/status_macros.h"
#include "kernels/common/tensor_checks.h"
#include "kernels/linear/causal_linear_attention_cpu.h"
#include "kernels/linear/linear_decode_cpu.h"
#if defined(ATTNSERVE_WITH_CUDA_TORCH)
#include "kernels/linear/linear_attention_cuda_torch.h"
#endif

namespace attnserve::kernels {

MixerState ZeroLinearAttentionState(int64_t batch, int64_t heads, int64_t head_dim,
                                    at::Device device) {
  const at::TensorOptions options = at::TensorOptions(at::kFloat).device(device);
  MixerState state;
  state.tensors = {at::zeros({batch, heads, head_dim, head_dim}, options),
                   at::zeros({batch, heads, head_dim}, options)};
  return state;
}

absl::StatusOr<LinearAttentionResult> CausalLinearAttentionOnDevice(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& s,
    const at::Tensor& z, bool map_features) {
  if (q.is_cuda()) {
#if defined(ATTNSERVE_WITH_CUDA_TORCH)
    linear::LinearAttentionCudaResult r =
        linear::CausalLinearAttentionCuda(q, k, v, s, z, {}, {}, {}, map_features);
    return LinearAttentionResult{std::move(r.out), std::move(r.s), std::move(r.z)};
#else
    return absl::FailedPreconditionError("linear: CUDA tensors in a build without CUDA kernels");
#endif
  }
  return CausalLinearAttentionOnFeaturesCpu(q, k, v, s, z, kLinearAttentionChunk, map_features);
}

absl::StatusOr<LinearAttentionResult> CausalLinearAttentionStepOnDevice(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& s,
    const at::Tensor& z, bool map_features) {
  if (q.is_cuda()) {
#if defined(ATTNSERVE_WITH_CUDA_TORCH)
    const at::Tensor s_c = s.contiguous(), z_c = z.contiguous();
    at::Tensor out = linear::CausalLinearAttentionStepCuda(q, k, v, s_c, z_c, {}, map_features);
    return LinearAttentionResult{std::move(out), s_c, z_c};
#else
    return absl::FailedPreconditionError("linear: CUDA tensors in a build without CUDA kernels");
#endif
  }
  return CausalLinearAttentionStepOnFeaturesCpu(q, k, v, s, z, map_features);
}

LinearDecodeRow LinearStateRow(MixerState& state, int64_t b) {
  for (at::Tensor& t : state.tensors) {
    if (!t.is_contiguous()) t = t.contiguous();
  }
  const at::Tensor& s = state.tensors[0];
  const int64_t h = s.size(1), d = s.size(2);
  return {s.data_ptr<float>() + b * h * d * d, state.tensors[1].data_ptr<float>() + b * h * d};
}

at::Tensor LinearDecodeOnRowsCpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const std::vector<LinearDecodeRow>& rows, bool map_features) {
  const at::Tensor q_c = q.contiguous(), k_c = k.contiguous(), v_c = v.contiguous();
  at::Tensor heads = at::empty_like(q_c);
  LinearAttentionDecodeCpu(q_c.data_ptr<float>(), k_c.data_ptr<float>(), v_c.data_ptr<float>(),
                           rows.data(), q_c.size(0), q_c.size(1), q_c.size(3),
                           heads.data_ptr<float>(), map_features);
  return heads;
}

namespace {

class LinearAttentionMixer final : public Mixer {
 public:
  LinearAttentionMixer(const MixerConfig& config, AttentionProjections projections)
      : config_(config), projections_(std::move(projections)) {}

  const MixerConfig& config() const override { return config_; }
  bool can_stream() const override { return config_.causal; }

  absl::StatusOr<MixerState> InitialState(int64_t batch) const override {
    RETURN_IF_ERROR(CheckCanStream("InitialState"));
    if (batch <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("batch must be > 0, got ", batch));
    }
    return GuardTorch("linear InitialState", [&]() -> absl::StatusOr<MixerState> {
      return ZeroLinearAttentionState(batch, config_.num_heads, config_.head_dim(), device());
    });
  }

  absl::StatusOr<at::Tensor> Prefill(const at::Tensor& x, MixerState* state) const override {
    if (state != nullptr) RETURN_IF_ERROR(CheckCanStream("Prefill with a state"));
    RETURN_IF_ERROR(CheckFloatTensor(x, "x", {-1, -1, config_.d_model}, device()));
    if (state != nullptr) RETURN_IF_ERROR(CheckState(*state, x.size(0)));
    return GuardTorch("linear Prefill", [&]() -> absl::StatusOr<at::Tensor> {
      auto [q, k, v] = projections_.ProjectQkv(x, config_.num_heads);  // (B, H, L, d)
      if (!config_.causal) {
        ASSIGN_OR_RETURN(at::Tensor heads, LinearAttentionCpu(q, k, v));
        return projections_.ProjectOutput(heads);
      }
      at::Tensor s, z;
      if (state != nullptr) {
        s = state->tensors[0];
        z = state->tensors[1];
      } else {
        const int64_t b = x.size(0), h = config_.num_heads, d = config_.head_dim();
        s = at::zeros({b, h, d, d}, x.options());
        z = at::zeros({b, h, d}, x.options());
      }
      ASSIGN_OR_RETURN(LinearAttentionResult result, CausalLinearAttentionOnDevice(q, k, v, s, z));
      if (state != nullptr) {
        state->tensors = {std::move(result.s), std::move(result.z)};
        state->position += x.size(1);
      }
      return projections_.ProjectOutput(result.out);
    });
  }

  absl::StatusOr<at::Tensor> Step(const at::Tensor& x_t, MixerState* state) const override {
    RETURN_IF_ERROR(CheckCanStream("Step"));
    RETURN_IF_ERROR(CheckFloatTensor(x_t, "x_t", {-1, config_.d_model}, device()));
    if (state == nullptr) return absl::InvalidArgumentError("Step needs a state, got null");
    RETURN_IF_ERROR(CheckState(*state, x_t.size(0)));
    return GuardTorch("linear Step", [&]() -> absl::StatusOr<at::Tensor> {
      const int64_t b = x_t.size(0);
      auto [q, k, v] = projections_.ProjectQkv(x_t.unsqueeze(1), config_.num_heads);
      if (x_t.is_cpu()) {  // in place, the same kernel as StepBatch
        std::vector<LinearDecodeRow> rows;
        for (int64_t i = 0; i < b; ++i) rows.push_back(LinearStateRow(*state, i));
        state->position += 1;
        return projections_.ProjectOutput(LinearDecodeOnRowsCpu(q, k, v, rows))
            .view({b, config_.d_model});
      }
      ASSIGN_OR_RETURN(LinearAttentionResult result,
                       CausalLinearAttentionStepOnDevice(q.squeeze(2), k.squeeze(2), v.squeeze(2),
                                                         state->tensors[0], state->tensors[1]));
      state->tensors = {std::move(result.s), std::move(result.z)};
      state->position += 1;
      return projections_.ProjectOutput(result.out.unsqueeze(2)).view({b, config_.d_model});
    });
  }

  // The projections run once over all B rows; one decode call updates every row's S and z in
  // place (linear_decode_cpu.h).
  absl::StatusOr<at::Tensor> StepBatch(const at::Tensor& x_t,
                                       const std::vector<MixerState*>& states) const override {
    RETURN_IF_ERROR(CheckCanStream("StepBatch"));
    if (!x_t.is_cpu()) return Mixer::StepBatch(x_t, states);
    RETURN_IF_ERROR(CheckStepBatch(x_t, states, config_.d_model, device()));
    for (const MixerState* state : states) RETURN_IF_ERROR(CheckState(*state, 1));
    return GuardTorch("linear StepBatch", [&]() -> absl::StatusOr<at::Tensor> {
      const int64_t b = x_t.size(0);
      auto [q, k, v] = projections_.ProjectQkv(x_t.unsqueeze(1), config_.num_heads);
      std::vector<LinearDecodeRow> rows;
      for (MixerState* state : states) {
        rows.push_back(LinearStateRow(*state, 0));
        state->position += 1;
      }
      return projections_.ProjectOutput(LinearDecodeOnRowsCpu(q, k, v, rows))
          .view({b, config_.d_model});
    });
  }

  bool StepReadsPosition() const override { return false; }

  int64_t StateBytesPerSequence(int64_t /*position*/) const override {
    if (!config_.causal) return 0;
    const int64_t h = config_.num_heads, d = config_.head_dim();
    return (h * d * d + h * d) * static_cast<int64_t>(sizeof(float));
  }

 private:
  at::Device device() const { return projections_.device(); }

  absl::Status CheckCanStream(const char* operation) const {
    if (config_.causal) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(
        "linear attention is bidirectional (causal=false): it cannot stream; ", operation,
        " is not available. Call Prefill with a null state on the whole sequence, or use a "
        "causal mixer (linear with causal=true, standard with causal=true, mamba) to stream"));
  }

  absl::Status CheckState(const MixerState& state, int64_t batch) const {
    const int64_t h = config_.num_heads, d = config_.head_dim();
    if (state.tensors.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("linear state: expected 2 tensors (S, z), got ", state.tensors.size()));
    }
    RETURN_IF_ERROR(CheckFloatTensor(state.tensors[0], "linear state S", {-1, h, d, d}, device()));
    if (state.tensors[0].size(0) != batch) {
      return absl::InvalidArgumentError(absl::StrCat("linear state holds a batch of ",
                                                     state.tensors[0].size(0),
                                                     " sequences, but x has ", batch));
    }
    return CheckFloatTensor(state.tensors[1], "linear state z", {batch, h, d}, device());
  }

  const MixerConfig config_;
  const AttentionProjections projections_;
};

}  // namespace

std::vector<WeightSpec> ExpectedLinearWeights(const MixerConfig& config) {
  return AttentionProjectionSpecs(config);
}

WeightMap RandomLinearWeights(const MixerConfig& config, at::Generator& gen) {
  WeightMap weights;
  AddRandomAttentionProjections(config, gen, &weights);
  return weights;
}

std::unique_ptr<Mixer> CreateLinearMixer(const MixerConfig& config, const WeightMap& weights) {
  return std::make_unique<LinearAttentionMixer>(
      config, AttentionProjections::FromWeights(weights, config.weight_format));
}

}  // namespace attnserve::kernels

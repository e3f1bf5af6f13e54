#include "kernels/linformer/linformer_attention.h"

#include <ATen/ATen.h>

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/common/attention_projections.h"
#include "kernels/common/status_macros.h"
#include "kernels/common/tensor_checks.h"
#if defined(ATTNSERVE_WITH_CUDA_TORCH)
#include "kernels/linformer/linformer_cuda_torch.h"
#endif

namespace attnserve::kernels {
namespace {

// Matrix products: through ATen on the CPU (the BLAS LibTorch links); on CUDA weights, when
// this build has the CUDA kernels, through linformer_cuda_torch.h (cuBLAS batched products and
// a fused row softmax).
class LinformerMixer final : public Mixer {
 public:
  LinformerMixer(const MixerConfig& config, AttentionProjections projections, at::Tensor e,
                 at::Tensor f)
      : config_(config), projections_(std::move(projections)), e_(std::move(e)), f_(std::move(f)) {}

  const MixerConfig& config() const override { return config_; }
  bool can_stream() const override { return false; }

  absl::StatusOr<MixerState> InitialState(int64_t /*batch*/) const override {
    return CannotStream("InitialState");
  }

  absl::StatusOr<at::Tensor> Prefill(const at::Tensor& x, MixerState* state) const override {
    if (state != nullptr) return CannotStream("Prefill with a state");
    RETURN_IF_ERROR(CheckFloatTensor(x, "x", {-1, -1, config_.d_model}, projections_.device()));
    const int64_t length = x.size(1);
    if (length > config_.max_len && !config_.linformer_interpolate) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence length ", length, " exceeds linformer max_len ", config_.max_len,
                       " (E and F have max_len rows); split the input or "
                       "use standard, linear or mamba for longer sequences"));
    }
    return GuardTorch("linformer Prefill", [&]() -> absl::StatusOr<at::Tensor> {
      auto [q, k, v] = projections_.ProjectQkv(x, config_.num_heads);  // (B, H, L, d)
      // Past max_len (linformer_extend "interpolate"): E and F stretched to L rows.
      const bool stretch = length > config_.max_len;
      const at::Tensor e = stretch ? InterpolateLinformerProjection(e_, length) : e_;
      const at::Tensor f = stretch ? InterpolateLinformerProjection(f_, length) : f_;
#if defined(ATTNSERVE_WITH_CUDA_TORCH)
      if (q.is_cuda()) {
        return projections_.ProjectOutput(linformer::LinformerAttentionCuda(q, k, v, e, f));
      }
#endif
      // (k, L) @ (B, H, L, d) -> (B, H, k, d): the sequence projected to k rows per head.
      const at::Tensor k_projected = at::matmul(e.narrow(0, 0, length).t(), k);
      const at::Tensor v_projected = at::matmul(f.narrow(0, 0, length).t(), v);
      const double scale = 1.0 / std::sqrt(static_cast<double>(config_.head_dim()));
      const at::Tensor scores = at::matmul(q.mul(scale), k_projected.transpose(-1, -2));
      return projections_.ProjectOutput(at::matmul(at::softmax(scores, -1), v_projected));
    });
  }

  absl::StatusOr<at::Tensor> Step(const at::Tensor& /*x_t*/, MixerState* /*state*/) const override {
    return CannotStream("Step");
  }

  int64_t StateBytesPerSequence(int64_t /*position*/) const override { return 0; }

 private:
  static absl::Status CannotStream(const char* operation) {
    return absl::FailedPreconditionError(absl::StrCat(
        "linformer attention cannot stream (", operation,
        "): it is not causal, its E and F projections mix all positions of the sequence. "
        "Call Prefill with a null state on the whole sequence, or use standard (causal), "
        "linear or mamba to stream"));
  }

  const MixerConfig config_;
  const AttentionProjections projections_;
  const at::Tensor e_;  // (max_len, k)
  const at::Tensor f_;  // (max_len, k)
};

}  // namespace

at::Tensor InterpolateLinformerProjection(const at::Tensor& projection, int64_t length) {
  const int64_t rows = projection.size(0);
  // (rows, k) as k channels over `rows` positions -> `length` positions, half-pixel centres
  // (align_corners false): position i samples (i + 0.5) * rows / length - 0.5.
  const at::Tensor stretched =
      at::upsample_linear1d(projection.t().unsqueeze(0), {length}, /*align_corners=*/false)
          .squeeze(0)
          .t();
  return stretched.mul(static_cast<double>(rows) / static_cast<double>(length)).contiguous();
}

std::vector<WeightSpec> ExpectedLinformerWeights(const MixerConfig& config) {
  std::vector<WeightSpec> specs = AttentionProjectionSpecs(config);
  specs.push_back({kLinformerE, {config.max_len, config.linformer_k}});
  specs.push_back({kLinformerF, {config.max_len, config.linformer_k}});
  return specs;
}

WeightMap RandomLinformerWeights(const MixerConfig& config, at::Generator& gen) {
  WeightMap weights;
  AddRandomAttentionProjections(config, gen, &weights);
  // Normal(0, 1/sqrt(k)): the same 1/sqrt(width) scale as the q/k/v/o projections (trained
  // checkpoints bring their own E and F; these only have to be well conditioned).
  const double std = 1.0 / std::sqrt(static_cast<double>(config.linformer_k));
  for (const char* name : {kLinformerE, kLinformerF}) {
    weights[name] = at::normal(0.0, std, {config.max_len, config.linformer_k}, gen);
  }
  return weights;
}

std::unique_ptr<Mixer> CreateLinformerMixer(const MixerConfig& config, const WeightMap& weights) {
  return std::make_unique<LinformerMixer>(
      config, AttentionProjections::FromWeights(weights, config.weight_format),
      weights.at(kLinformerE).contiguous(), weights.at(kLinformerF).contiguous());
}

}  // namespace attnserve::kernels

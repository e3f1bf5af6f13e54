#include "kernels/standard/standard_attention.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/common/attention_projections.h"
#include "kernels/common/status_macros.h"
#include "kernels/common/tensor_checks.h"
#include "kernels/standard/decode_attention_cpu.h"
#include "kernels/standard/flash_attention.h"
#include "kernels/standard/kv_cache.h"
#if defined(ATTNSERVE_WITH_CUDA_TORCH)
#include "kernels/standard/flash_attention_cuda_torch.h"
#endif

namespace attnserve::kernels {
namespace {

class StandardAttentionMixer final : public Mixer {
 public:
  StandardAttentionMixer(const MixerConfig& config, AttentionProjections projections)
      : config_(config), projections_(std::move(projections)) {}

  const MixerConfig& config() const override { return config_; }
  bool can_stream() const override { return config_.causal; }

  absl::StatusOr<MixerState> InitialState(int64_t batch) const override {
    RETURN_IF_ERROR(CheckCanStream("InitialState"));
    if (batch <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("batch must be > 0, got ", batch));
    }
    return GuardTorch("standard InitialState", [&]() -> absl::StatusOr<MixerState> {
      // Capacity 0: a fresh state holds no memory; the first Prefill or Step allocates.
      return EmptyKvCache(batch, config_.num_heads, config_.head_dim(), device());
    });
  }

  absl::StatusOr<at::Tensor> Prefill(const at::Tensor& x, MixerState* state) const override {
    if (state != nullptr) RETURN_IF_ERROR(CheckCanStream("Prefill with a state"));
    RETURN_IF_ERROR(CheckFloatTensor(x, "x", {-1, -1, config_.d_model}, device()));
    if (state != nullptr) RETURN_IF_ERROR(CheckState(*state, x.size(0)));
    return GuardTorch("standard Prefill", [&]() -> absl::StatusOr<at::Tensor> {
      auto [q, k, v] = projections_.ProjectQkv(x, config_.num_heads);
      at::Tensor heads;
      if (state == nullptr) {
        ASSIGN_OR_RETURN(heads, FlashAttention(q, k, v, config_.causal));
      } else {
        auto [k_cache, v_cache] = AppendToKvCache(*state, k, v);
        const int64_t length = state->position + x.size(1);
        // The chunk's queries are the last x.size(1) of `length` positions.
        ASSIGN_OR_RETURN(
            heads, FlashAttention(q, k_cache.narrow(2, 0, length), v_cache.narrow(2, 0, length),
                                  /*causal=*/true));
        state->tensors = {std::move(k_cache), std::move(v_cache)};
        state->position = length;
      }
      return projections_.ProjectOutput(heads);
    });
  }

  absl::StatusOr<at::Tensor> Step(const at::Tensor& x_t, MixerState* state) const override {
    RETURN_IF_ERROR(CheckCanStream("Step"));
    RETURN_IF_ERROR(CheckFloatTensor(x_t, "x_t", {-1, config_.d_model}, device()));
    if (state == nullptr) return absl::InvalidArgumentError("Step needs a state, got null");
    RETURN_IF_ERROR(CheckState(*state, x_t.size(0)));
    return GuardTorch("standard Step", [&]() -> absl::StatusOr<at::Tensor> {
      const int64_t b = x_t.size(0), h = config_.num_heads;
      auto [q, k, v] = projections_.ProjectQkv(x_t.unsqueeze(1), h);  // (B, H, 1, d)
      auto [k_cache, v_cache] = AppendToKvCache(*state, k, v);
      const int64_t length = state->position + 1;
      state->position = length;
#if defined(ATTNSERVE_WITH_CUDA_TORCH)
      if (q.is_cuda()) {
        // The decode kernel reads the first `length` rows of each cache in place.
        at::Tensor heads = standard::FlashDecodeCuda(q.squeeze(2), k_cache, v_cache,
                                                     /*seqlens=*/{}, length);
        state->tensors = {std::move(k_cache), std::move(v_cache)};
        return projections_.ProjectOutput(heads.unsqueeze(2)).view({b, config_.d_model});
      }
#endif
      std::vector<DecodeAttentionRow> rows;
      for (int64_t i = 0; i < b; ++i) rows.push_back(KvCacheRow(k_cache, v_cache, i, length));
      const at::Tensor heads = DecodeAttentionHeads(q, rows);
      state->tensors = {std::move(k_cache), std::move(v_cache)};
      return projections_.ProjectOutput(heads).view({b, config_.d_model});
    });
  }

  // The projections run once over all B rows; one decode-attention call covers every row, each
  // over its own cache of its own length (no padding to the longest row).
  absl::StatusOr<at::Tensor> StepBatch(const at::Tensor& x_t,
                                       const std::vector<MixerState*>& states) const override {
    RETURN_IF_ERROR(CheckCanStream("StepBatch"));
    if (!x_t.is_cpu()) return Mixer::StepBatch(x_t, states);
    RETURN_IF_ERROR(CheckStepBatch(x_t, states, config_.d_model, device()));
    for (const MixerState* state : states) RETURN_IF_ERROR(CheckState(*state, 1));
    return GuardTorch("standard StepBatch", [&]() -> absl::StatusOr<at::Tensor> {
      const int64_t b = x_t.size(0);
      auto [q, k, v] = projections_.ProjectQkv(x_t.unsqueeze(1), config_.num_heads);
      std::vector<DecodeAttentionRow> rows;
      for (int64_t i = 0; i < b; ++i) {
        MixerState& state = *states[i];
        auto [k_cache, v_cache] = AppendToKvCache(state, k.narrow(0, i, 1), v.narrow(0, i, 1));
        state.tensors = {std::move(k_cache), std::move(v_cache)};
        state.position += 1;
        rows.push_back(KvCacheRow(state.tensors[0], state.tensors[1], 0, state.position));
      }
      return projections_.ProjectOutput(DecodeAttentionHeads(q, rows)).view({b, config_.d_model});
    });
  }

  int64_t StateBytesPerSequence(int64_t position) const override {
    if (!config_.causal) return 0;
    return 2 * config_.num_heads * position * config_.head_dim() *
           static_cast<int64_t>(sizeof(float));
  }

 private:
  at::Device device() const { return projections_.device(); }

  absl::Status CheckCanStream(const char* operation) const {
    if (config_.causal) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(
        "standard attention is bidirectional (causal=false): it cannot stream; ", operation,
        " is not available. Call Prefill with a null state on the whole sequence, or use a "
        "causal mixer (standard with causal=true, linear, mamba) to stream"));
  }

  // A state made by InitialState (or a Clone or a reload of one) for a batch of `batch`.
  absl::Status CheckState(const MixerState& state, int64_t batch) const {
    return CheckKvCache(state, batch, config_.num_heads, config_.head_dim(), device(), "standard");
  }

  const MixerConfig config_;
  const AttentionProjections projections_;
};

}  // namespace

std::vector<WeightSpec> ExpectedStandardWeights(const MixerConfig& config) {
  return AttentionProjectionSpecs(config);
}

WeightMap RandomStandardWeights(const MixerConfig& config, at::Generator& gen) {
  WeightMap weights;
  AddRandomAttentionProjections(config, gen, &weights);
  return weights;
}

std::unique_ptr<Mixer> CreateStandardMixer(const MixerConfig& config, const WeightMap& weights) {
  return std::make_unique<StandardAttentionMixer>(
      config, AttentionProjections::FromWeights(weights, config.bf16_weights));
}

}  // namespace attnserve::kernels

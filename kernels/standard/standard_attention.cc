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
#if defined(ATTNSERVE_WITH_CUDA_TORCH)
#include "kernels/standard/flash_attention_cuda_torch.h"
#endif

namespace attnserve::kernels {
namespace {

// Smallest capacity a cache grows to, so that decoding from an empty state does not
// reallocate on each of its first tokens.
constexpr int64_t kMinCacheCapacity = 64;

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
      MixerState state;
      // Capacity 0: a fresh state holds no memory; the first Prefill or Step allocates.
      const at::Tensor empty = at::zeros({batch, config_.num_heads, 0, config_.head_dim()},
                                         at::TensorOptions(at::kFloat).device(device()));
      state.tensors = {empty, empty.clone()};
      return state;
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
        auto [k_cache, v_cache] = Append(*state, k, v);
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
      auto [k_cache, v_cache] = Append(*state, k, v);
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
      for (int64_t i = 0; i < b; ++i) rows.push_back(CacheRow(k_cache, v_cache, i, length));
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
        auto [k_cache, v_cache] = Append(state, k.narrow(0, i, 1), v.narrow(0, i, 1));
        state.tensors = {std::move(k_cache), std::move(v_cache)};
        state.position += 1;
        rows.push_back(CacheRow(state.tensors[0], state.tensors[1], 0, state.position));
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
    const int64_t h = config_.num_heads, d = config_.head_dim();
    if (state.tensors.size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "standard state: expected 2 tensors (k_cache, v_cache), got ", state.tensors.size()));
    }
    RETURN_IF_ERROR(
        CheckFloatTensor(state.tensors[0], "standard state k_cache", {-1, h, -1, d}, device()));
    const at::Tensor& k_cache = state.tensors[0];
    if (k_cache.size(0) != batch) {
      return absl::InvalidArgumentError(absl::StrCat(
          "standard state holds a batch of ", k_cache.size(0), " sequences, but x has ", batch));
    }
    RETURN_IF_ERROR(CheckFloatTensor(state.tensors[1], "standard state v_cache",
                                     {batch, h, k_cache.size(2), d}, device()));
    if (state.position < 0 || state.position > k_cache.size(2)) {
      return absl::InvalidArgumentError(absl::StrCat("standard state: position ", state.position,
                                                     " is outside the KV cache capacity [0, ",
                                                     k_cache.size(2), "]"));
    }
    return absl::OkStatus();
  }

  // Row `b` of caches (B, H, capacity, d) for the decode kernel.
  static DecodeAttentionRow CacheRow(const at::Tensor& k_cache, const at::Tensor& v_cache,
                                     int64_t b, int64_t length) {
    const int64_t stride = k_cache.size(1) * k_cache.size(2) * k_cache.size(3);
    return {k_cache.data_ptr<float>() + b * stride, v_cache.data_ptr<float>() + b * stride, length,
            k_cache.size(2)};
  }

  // Writes k, v (B, H, L, d) at positions [position, position + L) of the state's caches and
  // returns the caches to use from now on: the same tensors when they have room (and are
  // plain contiguous tensors we may write into), otherwise new ones with at least double the
  // capacity holding the valid prefix. The state itself is not modified here.
  static std::pair<at::Tensor, at::Tensor> Append(const MixerState& state, const at::Tensor& k,
                                                  const at::Tensor& v) {
    at::Tensor k_cache = state.tensors[0], v_cache = state.tensors[1];
    const int64_t position = state.position, length = k.size(2);
    const int64_t needed = position + length;
    if (needed > k_cache.size(2) || !k_cache.is_contiguous() || !v_cache.is_contiguous()) {
      const int64_t capacity = std::max({needed, 2 * k_cache.size(2), kMinCacheCapacity});
      at::Tensor new_k = at::empty({k.size(0), k.size(1), capacity, k.size(3)}, k.options());
      at::Tensor new_v = at::empty_like(new_k);
      new_k.narrow(2, 0, position).copy_(k_cache.narrow(2, 0, position));
      new_v.narrow(2, 0, position).copy_(v_cache.narrow(2, 0, position));
      k_cache = std::move(new_k);
      v_cache = std::move(new_v);
    }
    k_cache.narrow(2, position, length).copy_(k);
    v_cache.narrow(2, position, length).copy_(v);
    return {std::move(k_cache), std::move(v_cache)};
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

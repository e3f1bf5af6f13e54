#include "kernels/standard/kv_cache_mixer.h"

#include <ATen/ATen.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/common/status_macros.h"
#include "kernels/common/tensor_checks.h"
#include "kernels/standard/fused_attention_cpu.h"

namespace attnserve::kernels {

namespace {

// A cache's valid part as float32 for the attention kernels (a view of a float32 cache).
at::Tensor AsFloat(const at::Tensor& t) {
  return t.scalar_type() == at::kFloat ? t : t.to(at::kFloat);
}

}  // namespace

KvCacheAttentionMixer::KvCacheAttentionMixer(const MixerConfig& config,
                                             AttentionProjections projections, const char* name,
                                             at::ScalarType cache_dtype)
    : config_(config),
      projections_(std::move(projections)),
      name_(name),
      cache_dtype_(cache_dtype),
      rope_(config.rope, config.head_dim()) {}

at::Tensor KvCacheAttentionMixer::AsCached(const at::Tensor& k) const {
  return cache_dtype_ == at::kFloat ? k : k.to(cache_dtype_).to(at::kFloat);
}

absl::StatusOr<MixerState> KvCacheAttentionMixer::InitialState(int64_t batch) const {
  RETURN_IF_ERROR(CheckCanStream("InitialState"));
  if (batch <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("batch must be > 0, got ", batch));
  }
  return GuardTorch("InitialState", [&]() -> absl::StatusOr<MixerState> {
    // Capacity 0: a fresh state holds no memory; the first Prefill or Step allocates.
    return EmptyKvCache(batch, config_.kv_heads(), config_.head_dim(), device(), cache_dtype_);
  });
}

absl::StatusOr<at::Tensor> KvCacheAttentionMixer::Prefill(const at::Tensor& x,
                                                          MixerState* state) const {
  if (state != nullptr) RETURN_IF_ERROR(CheckCanStream("Prefill with a state"));
  RETURN_IF_ERROR(CheckFloatTensor(x, "x", {-1, -1, config_.d_model}, device()));
  if (state != nullptr) RETURN_IF_ERROR(CheckState(*state, x.size(0)));
  return GuardTorch("Prefill", [&]() -> absl::StatusOr<at::Tensor> {
    auto [q, k, v] = projections_.ProjectQkv(x, config_.num_heads);
    // The chunk's tokens are at positions state->position .. (0 .. without a state).
    const std::vector<int64_t> start = {state != nullptr ? state->position : 0};
    rope_.Apply(q, k, start);
    at::Tensor heads;
    if (state == nullptr) {
      ASSIGN_OR_RETURN(heads, Attend(q, AsCached(k), AsCached(v), config_.causal));
    } else {
      if (!state->shared.empty() &&
          !(ReadsSharedSegments() &&
            FusedAttentionSupports(q, state->tensors[0], state->tensors[1]))) {
        FlattenKvCache(*state, x.size(1));
      }
      auto [k_cache, v_cache] = AppendToKvCache(*state, k, v);
      const int64_t length = state->position + x.size(1);
      const int64_t own = length - state->SharedLength();
      // The chunk's queries are the last x.size(1) of `length` positions.
      if (state->shared.empty()) {
        ASSIGN_OR_RETURN(heads, Attend(q, AsFloat(k_cache.narrow(2, 0, length)),
                                       AsFloat(v_cache.narrow(2, 0, length)), /*causal=*/true));
      } else {
        ASSIGN_OR_RETURN(heads, FusedAttentionCpu(q, state->shared, k_cache.narrow(2, 0, own),
                                                  v_cache.narrow(2, 0, own), /*causal=*/true,
                                                  config_.attention_window));
      }
      state->tensors = {std::move(k_cache), std::move(v_cache)};
      state->position = length;
    }
    return projections_.ProjectOutput(heads);
  });
}

absl::StatusOr<at::Tensor> KvCacheAttentionMixer::Step(const at::Tensor& x_t,
                                                       MixerState* state) const {
  RETURN_IF_ERROR(CheckCanStream("Step"));
  RETURN_IF_ERROR(CheckFloatTensor(x_t, "x_t", {-1, config_.d_model}, device()));
  if (state == nullptr) return absl::InvalidArgumentError("Step needs a state, got null");
  RETURN_IF_ERROR(CheckState(*state, x_t.size(0)));
  return GuardTorch("Step", [&]() -> absl::StatusOr<at::Tensor> {
    // Segments are read on the CPU only (a state elsewhere never gets them: SharePrefix).
    if (!state->shared.empty() && (!ReadsSharedSegments() || !x_t.is_cpu())) {
      FlattenKvCache(*state, 1);
    }
    const int64_t b = x_t.size(0);
    auto [q, k, v] = projections_.ProjectQkv(x_t.unsqueeze(1), config_.num_heads);  // (B,H,1,d)
    rope_.Apply(q, k, {state->position});
    auto [k_cache, v_cache] = AppendToKvCache(*state, k, v);
    state->tensors = {std::move(k_cache), std::move(v_cache)};
    state->position += 1;
    std::vector<KvCacheRow> rows;
    for (int64_t i = 0; i < b; ++i) {
      rows.push_back({state->tensors[0], state->tensors[1], i, state->position, &state->shared});
    }
    ASSIGN_OR_RETURN(const at::Tensor heads, AttendCaches(q, rows));
    return projections_.ProjectOutput(heads).view({b, config_.output_dim()});
  });
}

// The projections run once over all B rows; one AttendCaches covers every row, each over its
// own cache of its own length (no padding to the longest row).
absl::StatusOr<at::Tensor> KvCacheAttentionMixer::StepBatch(
    const at::Tensor& x_t, const std::vector<MixerState*>& states) const {
  RETURN_IF_ERROR(CheckCanStream("StepBatch"));
  if (!x_t.is_cpu()) return Mixer::StepBatch(x_t, states);
  RETURN_IF_ERROR(CheckStepBatch(x_t, states, config_.d_model, device()));
  for (const MixerState* state : states) RETURN_IF_ERROR(CheckState(*state, 1));
  return GuardTorch("StepBatch", [&]() -> absl::StatusOr<at::Tensor> {
    const int64_t b = x_t.size(0);
    auto [q, k, v] = projections_.ProjectQkv(x_t.unsqueeze(1), config_.num_heads);
    std::vector<int64_t> positions(b);  // each row at its own state's position
    for (int64_t i = 0; i < b; ++i) positions[i] = states[i]->position;
    rope_.Apply(q, k, positions);
    std::vector<KvCacheRow> rows;
    for (int64_t i = 0; i < b; ++i) {
      MixerState& state = *states[i];
      if (!state.shared.empty() && !ReadsSharedSegments()) FlattenKvCache(state, 1);
      auto [k_cache, v_cache] = AppendToKvCache(state, k.narrow(0, i, 1), v.narrow(0, i, 1));
      state.tensors = {std::move(k_cache), std::move(v_cache)};
      state.position += 1;
      rows.push_back({state.tensors[0], state.tensors[1], 0, state.position, &state.shared});
    }
    ASSIGN_OR_RETURN(const at::Tensor heads, AttendCaches(q, rows));
    return projections_.ProjectOutput(heads).view({b, config_.output_dim()});
  });
}

int64_t KvCacheAttentionMixer::StateBytesPerSequence(int64_t position) const {
  if (!config_.causal) return 0;
  return 2 * config_.kv_heads() * position * config_.head_dim() *
         static_cast<int64_t>(c10::elementSize(cache_dtype_));
}

absl::Status KvCacheAttentionMixer::CheckCanStream(const char* operation) const {
  if (config_.causal) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      name_, " attention is bidirectional (causal=false): it cannot stream; ", operation,
      " is not available. Call Prefill with a null state on the whole sequence, or use a "
      "causal mixer (standard with causal=true, linear, mamba) to stream"));
}

absl::Status KvCacheAttentionMixer::CheckState(const MixerState& state, int64_t batch) const {
  return CheckKvCache(state, batch, config_.kv_heads(), config_.head_dim(), device(), name_,
                      cache_dtype_);
}

}  // namespace attnserve::kernels

#include "kernels/sliding_window/sliding_window_attention.h"

#include <ATen/ATen.h>

#include <algorithm>
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

class SlidingWindowAttentionMixer final : public Mixer {
 public:
  SlidingWindowAttentionMixer(const MixerConfig& config, AttentionProjections projections)
      : config_(config), projections_(std::move(projections)) {}

  const MixerConfig& config() const override { return config_; }
  bool can_stream() const override { return true; }

  absl::StatusOr<MixerState> InitialState(int64_t batch) const override {
    if (batch <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("batch must be > 0, got ", batch));
    }
    return GuardTorch("sliding_window InitialState", [&]() -> absl::StatusOr<MixerState> {
      MixerState state;
      const at::Tensor ring = at::zeros({batch, config_.num_heads, Slots(), config_.head_dim()},
                                        at::TensorOptions(at::kFloat).device(device()));
      state.tensors = {ring, ring.clone()};
      return state;
    });
  }

  absl::StatusOr<at::Tensor> Prefill(const at::Tensor& x, MixerState* state) const override {
    RETURN_IF_ERROR(CheckFloatTensor(x, "x", {-1, -1, config_.d_model}, device()));
    if (state != nullptr) RETURN_IF_ERROR(CheckState(*state, x.size(0)));
    return GuardTorch("sliding_window Prefill", [&]() -> absl::StatusOr<at::Tensor> {
      auto [q, k, v] = projections_.ProjectQkv(x, config_.num_heads);
      const int64_t w = config_.window, sinks = config_.sinks;
      if (state == nullptr) {
        ASSIGN_OR_RETURN(at::Tensor heads, FlashAttention(q, k, v, /*causal=*/true, w, sinks));
        return projections_.ProjectOutput(heads);
      }
      // The keys the chunk's first query still sees, in order: the sinks written so far, the
      // window's tokens after them (at most the last W - 1 before the chunk), then the chunk's
      // own. Between the sinks and the rest, distances in the list are the true ones, so the
      // kernel's window applies as it is.
      const int64_t position = state->position;
      const int64_t sunk = std::min(position, sinks);
      const int64_t past = std::max<int64_t>(0, position - std::max(sinks, position - (w - 1)));
      auto history = [&](const at::Tensor& slots, const at::Tensor& chunk) {
        return at::cat({slots.narrow(2, 0, sunk),
                        Chronological(slots.narrow(2, sinks, w), position - sinks, past), chunk},
                       2);
      };
      const at::Tensor keys = history(state->tensors[0], k);
      const at::Tensor values = history(state->tensors[1], v);
      ASSIGN_OR_RETURN(at::Tensor heads,
                       FlashAttention(q, keys, values, /*causal=*/true, w, sinks));
      Write(state, k, v);
      return projections_.ProjectOutput(heads);
    });
  }

  absl::StatusOr<at::Tensor> Step(const at::Tensor& x_t, MixerState* state) const override {
    RETURN_IF_ERROR(CheckFloatTensor(x_t, "x_t", {-1, config_.d_model}, device()));
    if (state == nullptr) return absl::InvalidArgumentError("Step needs a state, got null");
    RETURN_IF_ERROR(CheckState(*state, x_t.size(0)));
    return GuardTorch("sliding_window Step", [&]() -> absl::StatusOr<at::Tensor> {
      const int64_t b = x_t.size(0);
      auto [q, k, v] = projections_.ProjectQkv(x_t.unsqueeze(1), config_.num_heads);
      Write(state, k, v);
      std::vector<RingOfRow> rows;
      for (int64_t i = 0; i < b; ++i) rows.push_back({state, i});
      ASSIGN_OR_RETURN(at::Tensor heads, AttendRings(q, rows));
      return projections_.ProjectOutput(heads).view({b, config_.d_model});
    });
  }

  // The projections once over all B rows; one decode-attention call (CPU or CUDA) over every
  // row's own ring, in place.
  absl::StatusOr<at::Tensor> StepBatch(const at::Tensor& x_t,
                                       const std::vector<MixerState*>& states) const override {
    RETURN_IF_ERROR(CheckStepBatch(x_t, states, config_.d_model, device()));
    for (const MixerState* state : states) RETURN_IF_ERROR(CheckState(*state, 1));
    return GuardTorch("sliding_window StepBatch", [&]() -> absl::StatusOr<at::Tensor> {
      const int64_t b = x_t.size(0);
      auto [q, k, v] = projections_.ProjectQkv(x_t.unsqueeze(1), config_.num_heads);
      std::vector<RingOfRow> rows;
      for (int64_t i = 0; i < b; ++i) {
        Write(states[i], k.narrow(0, i, 1), v.narrow(0, i, 1));
        rows.push_back({states[i], 0});
      }
      ASSIGN_OR_RETURN(at::Tensor heads, AttendRings(q, rows));
      return projections_.ProjectOutput(heads).view({b, config_.d_model});
    });
  }

  int64_t StepKeysRead(int64_t position) const override {
    MixerState after;  // the valid slots once the token at `position` is written
    after.position = position + 1;
    return ValidSlots(after);
  }

  int64_t StateBytesPerSequence(int64_t) const override {
    return 2 * config_.num_heads * Slots() * config_.head_dim() *
           static_cast<int64_t>(sizeof(float));
  }

 private:
  // Slots per head: the sinks', then the ring's.
  int64_t Slots() const { return config_.sinks + config_.window; }

  at::Device device() const { return projections_.device(); }

  absl::Status CheckState(const MixerState& state, int64_t batch) const {
    const int64_t h = config_.num_heads, d = config_.head_dim(), w = Slots();
    if (state.tensors.size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sliding_window state: expected 2 tensors (k_ring, v_ring), got ", state.tensors.size()));
    }
    RETURN_IF_ERROR(CheckFloatTensor(state.tensors[0], "sliding_window state k_ring",
                                     {batch, h, w, d}, device()));
    RETURN_IF_ERROR(CheckFloatTensor(state.tensors[1], "sliding_window state v_ring",
                                     {batch, h, w, d}, device()));
    if (!state.tensors[0].is_contiguous() || !state.tensors[1].is_contiguous()) {
      return absl::InvalidArgumentError("sliding_window state: rings must be contiguous");
    }
    if (state.position < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("sliding_window state: position ", state.position, " is negative"));
    }
    return absl::OkStatus();
  }

  // The last `count` entries before `position` (counted in the ring's own tokens) of a ring
  // (B, H, W, d), oldest first.
  at::Tensor Chronological(const at::Tensor& ring, int64_t position, int64_t count) const {
    const int64_t w = config_.window;
    if (count <= 0) return ring.narrow(2, 0, 0);
    const int64_t first = (position - count) % w;
    if (first + count <= w) return ring.narrow(2, first, count);
    return at::cat({ring.narrow(2, first, w - first), ring.narrow(2, 0, count - (w - first))}, 2);
  }

  // Writes k, v (B, H, L, d) of positions position .. position + L - 1 into the slots and
  // advances the position: positions below `sinks` to their own slot, the others to the ring
  // (position p at slot sinks + (p - sinks) mod W; only the last W survive).
  void Write(MixerState* state, const at::Tensor& k, const at::Tensor& v) const {
    const int64_t w = config_.window, sinks = config_.sinks, l = k.size(2);
    const int64_t position = state->position;
    auto copy = [&](int64_t slot, int64_t from, int64_t count) {
      state->tensors[0].narrow(2, slot, count).copy_(k.narrow(2, from, count));
      state->tensors[1].narrow(2, slot, count).copy_(v.narrow(2, from, count));
    };
    const int64_t sunk = std::clamp<int64_t>(sinks - position, 0, l);  // the chunk's sinks
    if (sunk > 0) copy(position, 0, sunk);
    const int64_t rest = l - sunk, keep = std::min(rest, w);
    for (int64_t i = l - keep; i < l;) {
      const int64_t slot = (position + i - sinks) % w;
      const int64_t run = std::min(l - i, w - slot);  // up to the ring's end
      copy(sinks + slot, i, run);
      i += run;
    }
    state->position += l;
  }

  // A state's valid slots are 0 .. n - 1 with n = min(position, sinks) +
  // min(max(position - sinks, 0), W): the sinks fill first, then the ring, so the valid slots
  // are contiguous (attention does not depend on the keys' order, only on which).
  int64_t ValidSlots(const MixerState& state) const {
    const int64_t sinks = config_.sinks, position = state.position;
    return std::min(position, sinks) +
           std::min(std::max<int64_t>(position - sinks, 0), config_.window);
  }

  // Batch row `row` of a state (its slots (H, sinks + W, d) for the decode kernels).
  struct RingOfRow {
    const MixerState* state;
    int64_t row;
  };

  // Decode attention: q (B, H, 1, d) row i over the valid slots of rows[i], each state at its
  // own position. Returns (B, H, 1, d). The CPU kernel reads the rings in place by pointer; on
  // CUDA the split-K decode kernel does, with the valid counts as its per-session lengths.
  absl::StatusOr<at::Tensor> AttendRings(const at::Tensor& q,
                                         const std::vector<RingOfRow>& rows) const {
    if (q.is_cuda()) {
#if defined(ATTNSERVE_WITH_CUDA_TORCH)
      std::vector<at::Tensor> keys, values;
      std::vector<int32_t> lengths;
      for (const RingOfRow& r : rows) {
        keys.push_back(r.state->tensors[0][r.row]);
        values.push_back(r.state->tensors[1][r.row]);
        lengths.push_back(static_cast<int32_t>(ValidSlots(*r.state)));
      }
      const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
      const at::Tensor seqlens = at::tensor(lengths, at::kInt).to(q.device());
      return standard::FlashDecodeCuda(q.squeeze(2), keys, values, seqlens, longest).unsqueeze(2);
#else
      return absl::FailedPreconditionError(
          "sliding_window: CUDA tensors in a build without CUDA kernels");
#endif
    }
    std::vector<DecodeAttentionRow> cpu_rows;
    for (const RingOfRow& r : rows) {
      const at::Tensor& k = r.state->tensors[0];
      const int64_t stride = k.size(1) * k.size(2) * k.size(3);
      cpu_rows.push_back({k.data_ptr<float>() + r.row * stride,
                          r.state->tensors[1].data_ptr<float>() + r.row * stride,
                          ValidSlots(*r.state), Slots()});
    }
    return DecodeAttentionHeads(q, cpu_rows);
  }

  const MixerConfig config_;
  const AttentionProjections projections_;
};

}  // namespace

std::unique_ptr<Mixer> CreateSlidingWindowMixer(const MixerConfig& config,
                                                const WeightMap& weights) {
  return std::make_unique<SlidingWindowAttentionMixer>(
      config, AttentionProjections::FromWeights(weights, config.weight_format));
}

}  // namespace attnserve::kernels

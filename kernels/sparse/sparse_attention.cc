#include "kernels/sparse/sparse_attention.h"

#include <ATen/ATen.h>

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/common/attention_projections.h"
#include "kernels/common/mixer_registry.h"
#include "kernels/common/status_macros.h"
#include "kernels/common/tensor_checks.h"
#include "kernels/sparse/sparse_attention_cpu.h"
#include "kernels/sparse/sparse_step_cpu.h"
#include "kernels/standard/kv_cache.h"

namespace attnserve::kernels {
namespace {

SparsePatternConfig PatternOf(const MixerConfig& config) {
  SparsePatternConfig p;
  p.pattern = config.sparse_pattern == "fixed" ? sparse::kFixed : sparse::kStrided;
  p.stride = config.sparse_stride;
  p.summary = config.sparse_summary;
  return p;
}

class SparseAttentionMixer final : public Mixer {
 public:
  SparseAttentionMixer(const MixerConfig& config, AttentionProjections projections)
      : config_(config), pattern_(PatternOf(config)), projections_(std::move(projections)) {}

  const MixerConfig& config() const override { return config_; }
  bool can_stream() const override { return config_.causal; }

  absl::StatusOr<MixerState> InitialState(int64_t batch) const override {
    RETURN_IF_ERROR(CheckCanStream("InitialState"));
    if (batch <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("batch must be > 0, got ", batch));
    }
    return GuardTorch("sparse InitialState", [&]() -> absl::StatusOr<MixerState> {
      return EmptyKvCache(batch, config_.num_heads, config_.head_dim(), device());
    });
  }

  absl::StatusOr<at::Tensor> Prefill(const at::Tensor& x, MixerState* state) const override {
    if (state != nullptr) RETURN_IF_ERROR(CheckCanStream("Prefill with a state"));
    RETURN_IF_ERROR(CheckFloatTensor(x, "x", {-1, -1, config_.d_model}, device()));
    if (state != nullptr) RETURN_IF_ERROR(CheckState(*state, x.size(0)));
    return GuardTorch("sparse Prefill", [&]() -> absl::StatusOr<at::Tensor> {
      auto [q, k, v] = projections_.ProjectQkv(x, config_.num_heads);
      at::Tensor heads;
      if (state == nullptr) {
        ASSIGN_OR_RETURN(heads, SparseAttentionCpu(q, k, v, config_.causal, pattern_));
      } else {
        auto [k_cache, v_cache] = AppendToKvCache(*state, k, v);
        const int64_t length = state->position + x.size(1);
        // The chunk's queries are the last x.size(1) of `length` positions.
        ASSIGN_OR_RETURN(heads, SparseAttentionCpu(q, k_cache.narrow(2, 0, length),
                                                   v_cache.narrow(2, 0, length),
                                                   /*causal=*/true, pattern_));
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
    return GuardTorch("sparse Step", [&]() -> absl::StatusOr<at::Tensor> {
      const int64_t b = x_t.size(0);
      auto [q, k, v] = projections_.ProjectQkv(x_t.unsqueeze(1), config_.num_heads);
      auto [k_cache, v_cache] = AppendToKvCache(*state, k, v);
      state->tensors = {std::move(k_cache), std::move(v_cache)};
      state->position += 1;
      std::vector<SparseCacheRow> rows;
      for (int64_t i = 0; i < b; ++i) {
        rows.push_back({state->tensors[0], state->tensors[1], i, state->position});
      }
      return projections_.ProjectOutput(Decode(q, rows)).view({b, config_.d_model});
    });
  }

  // The projections once over all B rows; each row appends to its own cache and reads its own
  // visible keys at its own length.
  absl::StatusOr<at::Tensor> StepBatch(const at::Tensor& x_t,
                                       const std::vector<MixerState*>& states) const override {
    RETURN_IF_ERROR(CheckCanStream("StepBatch"));
    RETURN_IF_ERROR(CheckStepBatch(x_t, states, config_.d_model, device()));
    for (const MixerState* state : states) RETURN_IF_ERROR(CheckState(*state, 1));
    return GuardTorch("sparse StepBatch", [&]() -> absl::StatusOr<at::Tensor> {
      const int64_t b = x_t.size(0);
      auto [q, k, v] = projections_.ProjectQkv(x_t.unsqueeze(1), config_.num_heads);
      std::vector<SparseCacheRow> rows;
      for (int64_t i = 0; i < b; ++i) {
        MixerState& state = *states[i];
        auto [k_cache, v_cache] = AppendToKvCache(state, k.narrow(0, i, 1), v.narrow(0, i, 1));
        state.tensors = {std::move(k_cache), std::move(v_cache)};
        state.position += 1;
        rows.push_back({state.tensors[0], state.tensors[1], 0, state.position});
      }
      return projections_.ProjectOutput(Decode(q, rows)).view({b, config_.d_model});
    });
  }

  int64_t StateBytesPerSequence(int64_t position) const override {
    if (!config_.causal) return 0;
    return 2 * config_.num_heads * position * config_.head_dim() *
           static_cast<int64_t>(sizeof(float));
  }

 private:
  at::Device device() const { return projections_.device(); }

  // q (B, H, 1, d): the CPU decode kernel reads the caches' visible keys; on CUDA the same
  // keys are gathered and attended with ATen.
  at::Tensor Decode(const at::Tensor& q, const std::vector<SparseCacheRow>& rows) const {
    if (q.is_cpu()) return SparseDecodeHeads(q, rows, pattern_);
    std::vector<at::Tensor> heads;
    for (size_t i = 0; i < rows.size(); ++i) {
      const at::Tensor index =
          at::tensor(SparseStepPositions(pattern_, rows[i].length - 1), at::kLong)
              .to(q.device());
      const at::Tensor keys = rows[i].k_cache[rows[i].row].index_select(1, index);
      const at::Tensor values = rows[i].v_cache[rows[i].row].index_select(1, index);
      const at::Tensor qi = q[static_cast<int64_t>(i)];  // (H, 1, d)
      const at::Tensor scores =
          at::matmul(qi, keys.transpose(1, 2)) / std::sqrt(static_cast<double>(q.size(3)));
      heads.push_back(at::matmul(at::softmax(scores, -1), values));
    }
    return at::stack(heads);
  }

  absl::Status CheckCanStream(const char* operation) const {
    if (config_.causal) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(
        "sparse attention is bidirectional (causal=false): it cannot stream; ", operation,
        " is not available. Call Prefill with a null state on the whole sequence, or use a "
        "causal sparse model to stream"));
  }

  absl::Status CheckState(const MixerState& state, int64_t batch) const {
    return CheckKvCache(state, batch, config_.num_heads, config_.head_dim(), device(), "sparse");
  }

  const MixerConfig config_;
  const SparsePatternConfig pattern_;
  const AttentionProjections projections_;
};

}  // namespace

std::unique_ptr<Mixer> CreateSparseMixer(const MixerConfig& config, const WeightMap& weights) {
  return std::make_unique<SparseAttentionMixer>(
      config, AttentionProjections::FromWeights(weights, config.bf16_weights));
}

}  // namespace attnserve::kernels

#include "kernels/sparse/sparse_attention.h"

#include <ATen/ATen.h>

#include <utility>
#include <vector>

#include "kernels/common/attention_projections.h"
#include "kernels/sparse/sparse_attention_cpu.h"
#include "kernels/sparse/sparse_step_cpu.h"
#include "kernels/standard/kv_cache_mixer.h"

namespace attnserve::kernels {
namespace {

SparsePatternConfig PatternOf(const MixerConfig& config) {
  SparsePatternConfig p;
  p.pattern = config.sparse_pattern == "fixed" ? sparse::kFixed : sparse::kStrided;
  p.stride = config.sparse_stride;
  p.summary = config.sparse_summary;
  return p;
}

class SparseAttentionMixer final : public KvCacheAttentionMixer {
 public:
  SparseAttentionMixer(const MixerConfig& config, AttentionProjections projections)
      : KvCacheAttentionMixer(config, std::move(projections), "sparse"),
        pattern_(PatternOf(config)) {}

 private:
  absl::StatusOr<at::Tensor> Attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    bool causal) const override {
    return SparseAttentionCpu(q, k, v, causal, pattern_);
  }

  // Only the keys the pattern shows each row's newest token.
  absl::StatusOr<at::Tensor> AttendCaches(const at::Tensor& q,
                                          const std::vector<KvCacheRow>& rows) const override {
    return SparseDecodeHeads(q, rows, pattern_);
  }

  int64_t StepKeysRead(int64_t position) const override {
    return config().causal ? static_cast<int64_t>(SparseStepPositions(pattern_, position).size())
                           : 0;
  }

  const SparsePatternConfig pattern_;
};

}  // namespace

std::unique_ptr<Mixer> CreateSparseMixer(const MixerConfig& config, const WeightMap& weights) {
  return std::make_unique<SparseAttentionMixer>(
      config, AttentionProjections::FromWeights(weights, config.bf16_weights));
}

}  // namespace attnserve::kernels

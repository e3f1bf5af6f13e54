#include "kernels/sparse/sparse_attention.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "kernels/common/attention_projections.h"
#include "kernels/sparse/sparse_attention_cpu.h"
#include "kernels/sparse/sparse_step_cpu.h"
#include "kernels/standard/kv_cache_mixer.h"
#if defined(ATTNSERVE_WITH_CUDA_TORCH)
#include "kernels/sparse/sparse_attention_cuda_torch.h"
#include "kernels/standard/flash_attention_cuda_torch.h"
#endif

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
#if defined(ATTNSERVE_WITH_CUDA_TORCH)
    // The CUDA kernel (sparse_attention_cuda.h; compiled, not yet run on a GPU by its author).
    if (q.is_cuda() && CudaHeadDim(q)) {
      return sparse::SparseAttentionCuda(q, k, v, causal, pattern_.pattern, pattern_.stride,
                                         pattern_.summary);
    }
#endif
    return SparseAttentionCpu(q, k, v, causal, pattern_);
  }

  // Only the keys the pattern shows each row's newest token.
  absl::StatusOr<at::Tensor> AttendCaches(const at::Tensor& q,
                                          const std::vector<KvCacheRow>& rows) const override {
#if defined(ATTNSERVE_WITH_CUDA_TORCH)
    if (q.is_cuda() && CudaHeadDim(q)) return DecodeCuda(q, rows);
#endif
    return SparseDecodeHeads(q, rows, pattern_);
  }

#if defined(ATTNSERVE_WITH_CUDA_TORCH)
  static bool CudaHeadDim(const at::Tensor& q) { return q.size(3) == 64 || q.size(3) == 128; }

  // The visible keys of each row gathered (SparseStepPositions), then the split-K decode kernel
  // over them (kernels/standard/flash_attention_cuda.h): one batched gather when the rows are
  // one cache at one length (Step's), per-session gathers and lengths otherwise.
  at::Tensor DecodeCuda(const at::Tensor& q, const std::vector<KvCacheRow>& rows) const {
    const at::Tensor query = q.squeeze(2);
    bool one_cache = true;
    for (const KvCacheRow& r : rows) {
      one_cache = one_cache && r.k_cache.is_same(rows[0].k_cache) && r.length == rows[0].length &&
                  r.row == static_cast<int64_t>(&r - rows.data());
    }
    if (one_cache && static_cast<int64_t>(rows.size()) == rows[0].k_cache.size(0)) {
      const std::vector<int64_t> positions = SparseStepPositions(pattern_, rows[0].length - 1);
      const at::Tensor index = at::tensor(positions, at::kLong).to(q.device());
      const at::Tensor keys = rows[0].k_cache.index_select(2, index);
      const at::Tensor values = rows[0].v_cache.index_select(2, index);
      return standard::FlashDecodeCuda(query, keys, values, /*seqlens=*/{},
                                       static_cast<int64_t>(positions.size()))
          .unsqueeze(2);
    }
    std::vector<at::Tensor> keys, values;
    std::vector<int32_t> lengths;
    for (const KvCacheRow& r : rows) {
      const std::vector<int64_t> positions = SparseStepPositions(pattern_, r.length - 1);
      const at::Tensor index = at::tensor(positions, at::kLong).to(q.device());
      keys.push_back(r.k_cache[r.row].index_select(1, index));  // (H, n, d), contiguous
      values.push_back(r.v_cache[r.row].index_select(1, index));
      lengths.push_back(static_cast<int32_t>(positions.size()));
    }
    const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
    const at::Tensor seqlens = at::tensor(lengths, at::kInt).to(q.device());
    return standard::FlashDecodeCuda(query, keys, values, seqlens, longest).unsqueeze(2);
  }
#endif

  int64_t StepKeysRead(int64_t position) const override {
    return config().causal ? static_cast<int64_t>(SparseStepPositions(pattern_, position).size())
                           : 0;
  }

  const SparsePatternConfig pattern_;
};

}  // namespace

std::unique_ptr<Mixer> CreateSparseMixer(const MixerConfig& config, const WeightMap& weights) {
  return std::make_unique<SparseAttentionMixer>(
      config, AttentionProjections::FromWeights(weights, config.weight_format));
}

}  // namespace attnserve::kernels

#include "kernels/standard/standard_attention.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "kernels/common/attention_projections.h"
#include "kernels/standard/decode_attention_cpu.h"
#include "kernels/standard/flash_attention.h"
#include "kernels/standard/kv_cache_mixer.h"
#if defined(ATTNSERVE_WITH_CUDA_TORCH)
#include "kernels/standard/flash_attention_cuda_torch.h"
#endif

namespace attnserve::kernels {
namespace {

class StandardAttentionMixer final : public KvCacheAttentionMixer {
 public:
  StandardAttentionMixer(const MixerConfig& config, AttentionProjections projections)
      : KvCacheAttentionMixer(config, std::move(projections), "standard", config.kv_cache_dtype) {}

 private:
  absl::StatusOr<at::Tensor> Attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    bool causal) const override {
    return FlashAttention(q, k, v, causal, config().attention_window);
  }

  // Every key of each row's cache.
  absl::StatusOr<at::Tensor> AttendCaches(const at::Tensor& q,
                                          const std::vector<KvCacheRow>& rows) const override {
#if defined(ATTNSERVE_WITH_CUDA_TORCH)
    if (q.is_cuda()) {
      // Step's rows: the B rows of one batch cache at one length. The decode kernel reads the
      // first `length` rows of each cache in place, grouped heads too; a window reads its
      // latest positions (a view from its first).
      const int64_t length = rows[0].length, window = config().attention_window;
      const int64_t first = window > 0 ? std::max<int64_t>(0, length - window) : 0;
      return standard::FlashDecodeCuda(q.squeeze(2),
                                       rows[0].k_cache.narrow(2, first, length - first),
                                       rows[0].v_cache.narrow(2, first, length - first),
                                       /*seqlens=*/{}, length - first)
          .unsqueeze(2);
    }
#endif
    std::vector<DecodeAttentionRow> decode_rows;
    std::vector<std::vector<DecodeAttentionRow>> spans(rows.size());  // shared segments'
    std::vector<std::vector<DecodeAttentionRow>> window_spans(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      decode_rows.push_back(LastPositionsOf(DecodeRowOf(rows[i], &spans[i]),
                                            config().attention_window, config().head_dim(),
                                            &window_spans[i]));
    }
    return DecodeAttentionHeads(q, decode_rows, config().kv_heads());
  }

  // Prefill reads shared segments in place through the fused kernel, the decode kernel through
  // their spans.
  bool ReadsSharedSegments() const override { return true; }
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

std::unique_ptr<Mixer> CreateStandardMixerOver(const MixerConfig& config,
                                               AttentionProjections projections) {
  return std::make_unique<StandardAttentionMixer>(config, std::move(projections));
}

std::unique_ptr<Mixer> CreateStandardMixer(const MixerConfig& config, const WeightMap& weights) {
  return std::make_unique<StandardAttentionMixer>(
      config, AttentionProjections::FromConfig(config, weights));
}

}  // namespace attnserve::kernels

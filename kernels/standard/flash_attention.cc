#include "kernels/standard/flash_attention.h"

#include "kernels/standard/flash_attention_cpu.h"
#include "kernels/standard/fused_attention_cpu.h"
#if defined(ATTNSERVE_WITH_CUDA_TORCH)
#include "kernels/standard/flash_attention_cuda_torch.h"
#endif

namespace attnserve::kernels {
namespace {

// Below this many queries the fused kernel's blocks of 16 are mostly padding, and the tiled
// kernel was as fast or faster (1-4 queries over 4096 keys: 0.4-1.0 ms against 1.0-1.1 ms; 16:
// 1.4-2.6 ms against 0.6-1.2 ms; docs/benchmarks.md, issue #24's session-15 section).
constexpr int64_t kFusedMinQueries = 8;

}  // namespace

absl::StatusOr<at::Tensor> FlashAttention(const at::Tensor& q, const at::Tensor& k,
                                          const at::Tensor& v, bool causal, int64_t window,
                                          int64_t sinks) {
  if (q.is_cuda()) {
#if defined(ATTNSERVE_WITH_CUDA_TORCH)
    return standard::FlashAttentionCuda(q, k, v, causal, /*softmax_scale=*/0.0, /*out=*/{}, window,
                                        sinks);
#else
    return absl::FailedPreconditionError(
        "flash attention: CUDA tensors in a build without CUDA kernels");
#endif
  }
  if (q.dim() == 4 && q.size(2) >= kFusedMinQueries && FusedAttentionSupports(q, k, v)) {
    return FusedAttentionCpu(q, k, v, causal, window, sinks);
  }
  return FlashAttentionCpu(q, k, v, causal, /*tiles=*/{}, window, sinks);
}

}  // namespace attnserve::kernels

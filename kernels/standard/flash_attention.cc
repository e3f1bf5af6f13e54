#include "kernels/standard/flash_attention.h"

#include "kernels/standard/flash_attention_cpu.h"
#if defined(ATTNSERVE_WITH_CUDA_TORCH)
#include "kernels/standard/flash_attention_cuda_torch.h"
#endif

namespace attnserve::kernels {

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
  return FlashAttentionCpu(q, k, v, causal, /*tiles=*/{}, window, sinks);
}

}  // namespace attnserve::kernels

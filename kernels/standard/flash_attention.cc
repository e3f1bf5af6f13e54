#include "kernels/standard/flash_attention.h"

#include "kernels/standard/flash_attention_cpu.h"
#include "kernels/standard/fused_attention_cpu.h"
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
  // Every chunk the fused kernel takes goes to it, short ones too (it sends those to the decode
  // kernel), so that a KV cache whose prefix is shared in segments (kv_cache.h, which only the
  // fused kernel reads) computes the same bits as one that holds it all: a fork's outputs equal
  // its source's.
  if (FusedAttentionSupports(q, k, v)) {
    return FusedAttentionCpu(q, k, v, causal, window, sinks);
  }
  return FlashAttentionCpu(q, k, v, causal, /*tiles=*/{}, window, sinks);
}

}  // namespace attnserve::kernels

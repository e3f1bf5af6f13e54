#include "kernels/standard/flash_attention.h"

#include <ATen/ATen.h>

#include "kernels/standard/flash_attention_cpu.h"
#include "kernels/standard/fused_attention_cpu.h"
#if defined(ATTNSERVE_WITH_CUDA_TORCH)
#include "kernels/standard/flash_attention_cuda_torch.h"
#endif

namespace attnserve::kernels {

at::Tensor RepeatKvHeads(const at::Tensor& kv, int64_t heads) {
  if (!kv.defined() || kv.dim() != 4 || kv.size(1) == 0 || kv.size(1) == heads ||
      heads % kv.size(1) != 0) {
    return kv;
  }
  return kv.repeat_interleave(heads / kv.size(1), /*dim=*/1);
}

absl::StatusOr<at::Tensor> FlashAttention(const at::Tensor& q, const at::Tensor& k_heads,
                                          const at::Tensor& v_heads, bool causal, int64_t window,
                                          int64_t sinks) {
  // The fused and the CUDA kernels read grouped key/value heads in place; the tiled ATen one
  // takes them repeated.
  if (q.is_cuda()) {
#if defined(ATTNSERVE_WITH_CUDA_TORCH)
    return standard::FlashAttentionCuda(q, k_heads, v_heads, causal, /*softmax_scale=*/0.0,
                                        /*out=*/{}, window, sinks);
#else
    return absl::FailedPreconditionError(
        "flash attention: CUDA tensors in a build without CUDA kernels");
#endif
  }
  if (FusedAttentionSupports(q, k_heads, v_heads)) {
    return FusedAttentionCpu(q, k_heads, v_heads, causal, window, sinks);
  }
  const at::Tensor k = RepeatKvHeads(k_heads, q.size(1)), v = RepeatKvHeads(v_heads, q.size(1));
  return FlashAttentionCpu(q, k, v, causal, /*tiles=*/{}, window, sinks);
}

}  // namespace attnserve::kernels

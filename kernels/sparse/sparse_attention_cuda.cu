// COMPILED, NOT RUN here (no GPU): see sparse_attention_cuda.h.
#include <string>

#include "kernels/sparse/sparse_attention_cuda.h"
#include "kernels/sparse/sparse_flash_walk.h"
#include "kernels/sparse/sparse_key_tiles.h"
#include "kernels/standard/flash_attention_kernel.cuh"

namespace attnserve::kernels::sparse {
namespace {

using cuda::CudaStatus;
using standard::FlashAttentionCudaParams;
namespace flash = standard::flash_detail;

SparseGeometry GeometryOf(const SparseAttentionCudaParams& p) {
  SparseGeometry g;
  g.pattern = p.pattern;
  g.stride = p.stride;
  g.summary = p.summary;
  g.causal = p.attn.causal;
  g.seqlen_q = p.attn.seqlen_q;
  g.seqlen_k = p.attn.seqlen_k;
  return g;
}

// Everything but the pointers (checked once there is work: RowsAligned).
CudaStatus Check(const SparseAttentionCudaParams& params) {
  const FlashAttentionCudaParams& p = params.attn;
  if (p.head_dim != 64 && p.head_dim != 128) {
    return CudaStatus::InvalidArgument("sparse attention (CUDA): head_dim must be 64 or 128, got " +
                                       std::to_string(p.head_dim));
  }
  if (params.pattern != kStrided && params.pattern != kFixed) {
    return CudaStatus::InvalidArgument(
        "sparse attention (CUDA): pattern must be strided (0) or "
        "fixed (1), got " +
        std::to_string(params.pattern));
  }
  if (params.stride < 1 ||
      (params.pattern == kFixed && (params.summary < 1 || params.summary > params.stride))) {
    return CudaStatus::InvalidArgument(
        "sparse attention (CUDA): need stride >= 1 and, fixed, 1 <= summary <= stride, got "
        "stride " +
        std::to_string(params.stride) + ", summary " + std::to_string(params.summary));
  }
  if (p.window != 0 || p.sinks != 0) {
    return CudaStatus::InvalidArgument("sparse attention (CUDA): window and sinks must be 0");
  }
  if (p.batch < 0 || p.heads < 0 || p.seqlen_q < 0 || p.seqlen_k < 0 || p.batch > 65535 ||
      p.heads > 65535) {
    return CudaStatus::InvalidArgument(
        "sparse attention (CUDA): need 0 <= batch, heads <= 65535 and seqlens >= 0, got batch " +
        std::to_string(p.batch) + ", heads " + std::to_string(p.heads) + ", seqlen_q " +
        std::to_string(p.seqlen_q) + ", seqlen_k " + std::to_string(p.seqlen_k));
  }
  if (p.causal ? p.seqlen_k < p.seqlen_q : p.seqlen_k != p.seqlen_q) {
    return CudaStatus::InvalidArgument(
        "sparse attention (CUDA): causal needs seqlen_k >= seqlen_q (the queries are the last "
        "seqlen_q positions), bidirectional seqlen_k = seqlen_q; got seqlen_q " +
        std::to_string(p.seqlen_q) + ", seqlen_k " + std::to_string(p.seqlen_k));
  }
  return CudaStatus();
}

}  // namespace

int64_t SparseAttentionWorkspaceElements(const SparseAttentionCudaParams& params) {
  const FlashAttentionCudaParams& p = params.attn;
  if (!SparseHasLongPart(GeometryOf(params))) return 0;
  return p.batch * p.heads * p.seqlen_q * (p.head_dim + 2);
}

CudaStatus LaunchSparseAttention(const SparseAttentionCudaParams& params, cudaStream_t stream) {
  if (CudaStatus status = Check(params); !status.ok()) return status;
  FlashAttentionCudaParams p = params.attn;
  if (p.batch == 0 || p.heads == 0 || p.seqlen_q == 0) return CudaStatus();
  if (!flash::RowsAligned(p.dtype, p.q, {p.q_batch_stride, p.q_head_stride, p.q_seq_stride}) ||
      !flash::RowsAligned(p.dtype, p.k, {p.k_batch_stride, p.k_head_stride, p.k_seq_stride}) ||
      !flash::RowsAligned(p.dtype, p.v, {p.v_batch_stride, p.v_head_stride, p.v_seq_stride}) ||
      !flash::RowsAligned(p.dtype, p.out,
                          {p.out_batch_stride, p.out_head_stride, p.out_seq_stride})) {
    return CudaStatus::InvalidArgument(
        "sparse attention (CUDA): q, k, v, out must be non-null with rows 16-byte (float32) or "
        "8-byte (bfloat16) aligned and strides that are multiples of 4 elements");
  }
  p.softmax_scale = flash::ResolveScale(p.softmax_scale, p.head_dim);
  const SparseGeometry g = GeometryOf(params);
  SparseFlashWalk local;
  local.g = g;
  local.part = kLocal;
  local.rows = flash::kBr;
  local.tile = flash::kBc;
  if (SparseHasLongPart(g)) {
    if (params.workspace == nullptr) {
      return CudaStatus::InvalidArgument(
          "sparse attention (CUDA): l < seqlen_k needs a workspace of "
          "SparseAttentionWorkspaceElements(params) floats, got null");
    }
    SparseFlashWalk long_part = local;
    long_part.part = kLong;
    long_part.out = params.workspace;
    if (CudaStatus status = flash::DispatchFlashWalk(p, long_part, long_part.blocks(), stream);
        !status.ok()) {
      return status;
    }
    local.in = params.workspace;
  }
  return flash::DispatchFlashWalk(p, local, local.blocks(), stream);
}

}  // namespace attnserve::kernels::sparse

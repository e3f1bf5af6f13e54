#include "kernels/sparse/sparse_attention_cuda_torch.h"

#include <ATen/ATen.h>

#include "kernels/common/cuda_torch_util.h"
#include "kernels/sparse/sparse_attention_cuda.h"

namespace attnserve::kernels::sparse {

at::Tensor SparseAttentionCuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               bool causal, int32_t pattern, int64_t stride, int64_t summary,
                               double softmax_scale, const at::Tensor& out) {
  using cuda::CheckCudaTensor;
  using cuda::RowsForVectorLoads;
  TORCH_CHECK(q.defined() && q.is_cuda(), "sparse attention: q must be a CUDA tensor");
  const at::Device device = q.device();
  const c10::cuda::CUDAGuard guard(device);
  CheckCudaTensor(q, "q", device, {-1, -1, -1, -1}, {at::kFloat, at::kBFloat16});
  const int64_t batch = q.size(0), heads = q.size(1), lq = q.size(2), d = q.size(3);
  TORCH_CHECK(d == 64 || d == 128, "sparse attention (CUDA): head_dim must be 64 or 128, got ", d);
  CheckCudaTensor(k, "k", device, {batch, heads, -1, d}, {q.scalar_type()});
  const int64_t lk = k.size(2);
  CheckCudaTensor(v, "v", device, {batch, heads, lk, d}, {q.scalar_type()});
  TORCH_CHECK(causal ? lk >= lq : lk == lq,
              "sparse attention: causal needs Lk >= Lq (the queries are the last Lq of the Lk "
              "positions), bidirectional Lk = Lq; got Lq = ",
              lq, ", Lk = ", lk);
  const at::Tensor q_c = RowsForVectorLoads(q), k_c = RowsForVectorLoads(k),
                   v_c = RowsForVectorLoads(v);
  at::Tensor result = cuda::OutputOrNew(out, "sparse attention out", q.sizes(), q.options());

  SparseAttentionCudaParams sp;
  standard::FlashAttentionCudaParams& p = sp.attn;
  p.batch = batch;
  p.heads = heads;
  p.seqlen_q = lq;
  p.seqlen_k = lk;
  p.head_dim = d;
  p.dtype = cuda::ToDType(q.scalar_type());
  p.causal = causal;
  p.softmax_scale = static_cast<float>(softmax_scale);
  p.q = q_c.data_ptr();
  p.q_batch_stride = q_c.stride(0);
  p.q_head_stride = q_c.stride(1);
  p.q_seq_stride = q_c.stride(2);
  p.k = k_c.data_ptr();
  p.k_batch_stride = k_c.stride(0);
  p.k_head_stride = k_c.stride(1);
  p.k_seq_stride = k_c.stride(2);
  p.v = v_c.data_ptr();
  p.v_batch_stride = v_c.stride(0);
  p.v_head_stride = v_c.stride(1);
  p.v_seq_stride = v_c.stride(2);
  p.out = result.data_ptr();
  p.out_batch_stride = result.stride(0);
  p.out_head_stride = result.stride(1);
  p.out_seq_stride = result.stride(2);
  sp.pattern = pattern;
  sp.stride = stride;
  sp.summary = summary;
  at::Tensor workspace;
  if (const int64_t n = SparseAttentionWorkspaceElements(sp); n > 0) {
    workspace = at::empty({n}, q.options().dtype(at::kFloat));
    sp.workspace = workspace.data_ptr<float>();
  }
  cuda::ThrowIfError(LaunchSparseAttention(sp, cuda::CurrentStream()));
  return result;  // the workspace is freed to the caching allocator, stream-ordered
}

}  // namespace attnserve::kernels::sparse

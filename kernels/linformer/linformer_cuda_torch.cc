#include "kernels/linformer/linformer_cuda_torch.h"

#include <ATen/ATen.h>

#include "kernels/common/cuda_torch_util.h"
#include "kernels/linformer/linformer_cuda.h"

namespace attnserve::kernels::linformer {

at::Tensor LinformerAttentionCuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& e, const at::Tensor& f, double softmax_scale,
                                  const at::Tensor& out) {
  using cuda::CheckCudaTensor;
  using cuda::LastDimContiguous;
  TORCH_CHECK(q.defined() && q.is_cuda(), "linformer: q must be a CUDA tensor");
  const at::Device device = q.device();
  const c10::cuda::CUDAGuard guard(device);
  CheckCudaTensor(q, "q", device, {-1, -1, -1, -1}, {at::kFloat});
  const int64_t batch = q.size(0), heads = q.size(1), len = q.size(2), d = q.size(3);
  CheckCudaTensor(k, "k", device, {batch, heads, len, d}, {at::kFloat});
  CheckCudaTensor(v, "v", device, {batch, heads, len, d}, {at::kFloat});
  CheckCudaTensor(e, "E", device, {-1, -1}, {at::kFloat});
  CheckCudaTensor(f, "F", device, {e.size(0), e.size(1)}, {at::kFloat});
  TORCH_CHECK(len <= e.size(0), "sequence length ", len, " exceeds linformer max_len ", e.size(0),
              " (E and F have max_len rows)");
  const at::Tensor q_c = LastDimContiguous(q), k_c = LastDimContiguous(k),
                   v_c = LastDimContiguous(v), e_c = LastDimContiguous(e),
                   f_c = LastDimContiguous(f);
  at::Tensor result = cuda::OutputOrNew(out, "linformer out", q.sizes(), q.options());

  LinformerCudaParams p;
  p.batch = batch;
  p.heads = heads;
  p.seqlen = len;
  p.head_dim = d;
  p.proj_len = e.size(1);
  p.softmax_scale = static_cast<float>(softmax_scale);
  p.q = q_c.data_ptr<float>();
  p.q_batch_stride = q_c.stride(0);
  p.q_head_stride = q_c.stride(1);
  p.q_seq_stride = q_c.stride(2);
  p.k = k_c.data_ptr<float>();
  p.k_batch_stride = k_c.stride(0);
  p.k_head_stride = k_c.stride(1);
  p.k_seq_stride = k_c.stride(2);
  p.v = v_c.data_ptr<float>();
  p.v_batch_stride = v_c.stride(0);
  p.v_head_stride = v_c.stride(1);
  p.v_seq_stride = v_c.stride(2);
  p.e = e_c.data_ptr<float>();
  p.e_row_stride = e_c.stride(0);
  p.f = f_c.data_ptr<float>();
  p.f_row_stride = f_c.stride(0);
  p.out = result.data_ptr<float>();
  p.out_batch_stride = result.stride(0);
  p.out_head_stride = result.stride(1);
  p.out_seq_stride = result.stride(2);
  const at::Tensor workspace =
      at::empty({LinformerWorkspaceElements(p)}, q.options().dtype(at::kFloat));
  p.workspace = workspace.data_ptr<float>();
  // torch's handle for the current device; getCurrentCUDABlasHandle has already bound it to
  // the current stream, which the launcher sets again.
  cuda::ThrowIfError(
      LaunchLinformerAttention(p, at::cuda::getCurrentCUDABlasHandle(), cuda::CurrentStream()));
  return result;
}

}  // namespace attnserve::kernels::linformer

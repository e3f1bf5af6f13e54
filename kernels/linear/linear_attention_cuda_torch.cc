#include "kernels/linear/linear_attention_cuda_torch.h"

#include <ATen/ATen.h>

#include <vector>

#include "kernels/common/cuda_torch_util.h"
#include "kernels/linear/linear_attention_cuda.h"

namespace attnserve::kernels::linear {
namespace {

using cuda::CheckCudaTensor;

// A float32 state tensor whose per-head blocks are contiguous (the kernels' layout).
void CheckStateLayout(const at::Tensor& t, const char* name) {
  bool ok = t.stride(-1) == 1;
  if (t.dim() == 4) ok = ok && t.stride(2) == t.size(3);
  TORCH_CHECK(ok, name, ": each head's block must be contiguous");
}

}  // namespace

LinearAttentionCudaResult CausalLinearAttentionCuda(const at::Tensor& q, const at::Tensor& k,
                                                    const at::Tensor& v, const at::Tensor& s,
                                                    const at::Tensor& z, const at::Tensor& out,
                                                    const at::Tensor& s_out,
                                                    const at::Tensor& z_out, bool map_features) {
  TORCH_CHECK(q.defined() && q.is_cuda(), "causal linear attention: q must be a CUDA tensor");
  const at::Device device = q.device();
  const c10::cuda::CUDAGuard guard(device);
  CheckCudaTensor(q, "q", device, {-1, -1, -1, -1}, {at::kFloat, at::kBFloat16});
  const int64_t batch = q.size(0), heads = q.size(1), len = q.size(2), d = q.size(3);
  TORCH_CHECK(d == 64 || d == 128,
              "causal linear attention (CUDA): head_dim must be 64 or 128, "
              "got ",
              d);
  CheckCudaTensor(k, "k", device, {batch, heads, len, d}, {q.scalar_type()});
  CheckCudaTensor(v, "v", device, {batch, heads, len, d}, {q.scalar_type()});
  CheckCudaTensor(s, "S", device, {batch, heads, d, d}, {at::kFloat});
  CheckCudaTensor(z, "z", device, {batch, heads, d}, {at::kFloat});
  const at::Tensor q_c = cuda::RowsForVectorLoads(q), k_c = cuda::RowsForVectorLoads(k),
                   v_c = cuda::RowsForVectorLoads(v);
  const at::Tensor s_in = s.is_contiguous() ? s : s.contiguous();
  const at::Tensor z_in = z.is_contiguous() ? z : z.contiguous();
  LinearAttentionCudaResult result;
  result.out = cuda::OutputOrNew(out, "linear attention out", q.sizes(), q.options());
  result.s = cuda::OutputOrNew(s_out, "linear attention s_out", s.sizes(), s.options());
  result.z = cuda::OutputOrNew(z_out, "linear attention z_out", z.sizes(), z.options());
  CheckStateLayout(result.s, "s_out");

  LinearAttentionCudaParams p;
  p.batch = batch;
  p.heads = heads;
  p.seqlen = len;
  p.head_dim = d;
  p.dtype = cuda::ToDType(q.scalar_type());
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
  p.out = result.out.data_ptr();
  p.out_batch_stride = result.out.stride(0);
  p.out_head_stride = result.out.stride(1);
  p.out_seq_stride = result.out.stride(2);
  // s_in, s_out (and z_in, z_out) are contiguous with the same shape: the same strides.
  p.s_in = s_in.data_ptr<float>();
  p.z_in = z_in.data_ptr<float>();
  p.s_out = result.s.data_ptr<float>();
  p.z_out = result.z.data_ptr<float>();
  p.s_batch_stride = s_in.stride(0);
  p.s_head_stride = s_in.stride(1);
  p.z_batch_stride = z_in.stride(0);
  p.z_head_stride = z_in.stride(1);

  int sm_count = 0;
  cuda::ThrowIfError(cuda::CurrentDeviceSmCount(&sm_count));
  p.map_features = map_features;
  p.num_segments = LinearAttentionNumSegments(p, sm_count);
  at::Tensor workspace;
  const int64_t workspace_elements = LinearAttentionWorkspaceElements(p);
  if (workspace_elements > 0) {
    workspace = at::empty({workspace_elements}, q.options().dtype(at::kFloat));
    p.workspace = workspace.data_ptr<float>();
  }
  cuda::ThrowIfError(LaunchLinearAttention(p, cuda::CurrentStream()));
  return result;
}

namespace {

// Everything but the states; keep_alive->front() is the output.
LinearAttentionDecodeCudaParams DecodeParams(const at::Tensor& q, const at::Tensor& k,
                                             const at::Tensor& v, const at::Tensor& out,
                                             std::vector<at::Tensor>* keep_alive) {
  const at::Device device = q.device();
  CheckCudaTensor(q, "q", device, {-1, -1, -1}, {at::kFloat, at::kBFloat16});
  const int64_t sessions = q.size(0), heads = q.size(1), d = q.size(2);
  TORCH_CHECK(d >= 1 && d <= 256, "linear attention step (CUDA): head_dim must be <= 256, got ", d);
  CheckCudaTensor(k, "k", device, {sessions, heads, d}, {q.scalar_type()});
  CheckCudaTensor(v, "v", device, {sessions, heads, d}, {q.scalar_type()});
  const at::Tensor q_c = cuda::LastDimContiguous(q), k_c = cuda::LastDimContiguous(k),
                   v_c = cuda::LastDimContiguous(v);
  at::Tensor result = cuda::OutputOrNew(out, "linear attention step out", q.sizes(), q.options());
  *keep_alive = {result, q_c, k_c, v_c};
  LinearAttentionDecodeCudaParams p;
  p.batch = sessions;
  p.heads = heads;
  p.head_dim = d;
  p.dtype = cuda::ToDType(q.scalar_type());
  p.q = q_c.data_ptr();
  p.q_batch_stride = q_c.stride(0);
  p.q_head_stride = q_c.stride(1);
  p.k = k_c.data_ptr();
  p.k_batch_stride = k_c.stride(0);
  p.k_head_stride = k_c.stride(1);
  p.v = v_c.data_ptr();
  p.v_batch_stride = v_c.stride(0);
  p.v_head_stride = v_c.stride(1);
  p.out = result.data_ptr();
  p.out_batch_stride = result.stride(0);
  p.out_head_stride = result.stride(1);
  return p;
}

}  // namespace

at::Tensor CausalLinearAttentionStepCuda(const at::Tensor& q, const at::Tensor& k,
                                         const at::Tensor& v, const at::Tensor& s,
                                         const at::Tensor& z, const at::Tensor& out,
                                         bool map_features) {
  TORCH_CHECK(q.defined() && q.is_cuda(), "linear attention step: q must be a CUDA tensor");
  const c10::cuda::CUDAGuard guard(q.device());
  std::vector<at::Tensor> keep_alive;
  LinearAttentionDecodeCudaParams p = DecodeParams(q, k, v, out, &keep_alive);
  CheckCudaTensor(s, "S", q.device(), {p.batch, p.heads, p.head_dim, p.head_dim}, {at::kFloat});
  CheckCudaTensor(z, "z", q.device(), {p.batch, p.heads, p.head_dim}, {at::kFloat});
  TORCH_CHECK(
      s.stride(3) == 1 && s.stride(2) == p.head_dim && s.stride(1) == p.head_dim * p.head_dim,
      "S: each session's (H, d, d) block must be contiguous");
  TORCH_CHECK(z.stride(2) == 1 && z.stride(1) == p.head_dim,
              "z: each session's (H, d) block must be contiguous");
  p.map_features = map_features;
  p.s = s.data_ptr<float>();
  p.s_batch_stride = s.stride(0);
  p.z = z.data_ptr<float>();
  p.z_batch_stride = z.stride(0);
  cuda::ThrowIfError(LaunchLinearAttentionDecode(p, cuda::CurrentStream()));
  return keep_alive.front();
}

at::Tensor CausalLinearAttentionStepCuda(const at::Tensor& q, const at::Tensor& k,
                                         const at::Tensor& v, const std::vector<at::Tensor>& s_list,
                                         const std::vector<at::Tensor>& z_list,
                                         const at::Tensor& out) {
  TORCH_CHECK(q.defined() && q.is_cuda(), "linear attention step: q must be a CUDA tensor");
  const c10::cuda::CUDAGuard guard(q.device());
  std::vector<at::Tensor> keep_alive;
  LinearAttentionDecodeCudaParams p = DecodeParams(q, k, v, out, &keep_alive);
  TORCH_CHECK(static_cast<int64_t>(s_list.size()) == p.batch &&
                  static_cast<int64_t>(z_list.size()) == p.batch,
              "linear attention step: expected ", p.batch, " S and z states, got ", s_list.size(),
              " and ", z_list.size());
  for (int64_t i = 0; i < p.batch; ++i) {
    CheckCudaTensor(s_list[i], "S", q.device(), {p.heads, p.head_dim, p.head_dim}, {at::kFloat});
    CheckCudaTensor(z_list[i], "z", q.device(), {p.heads, p.head_dim}, {at::kFloat});
    TORCH_CHECK(s_list[i].is_contiguous() && z_list[i].is_contiguous(),
                "linear attention step: every S and z state must be contiguous");
  }
  const at::Tensor s_ptrs = cuda::DevicePointerArray(s_list, q.device());
  const at::Tensor z_ptrs = cuda::DevicePointerArray(z_list, q.device());
  p.s_ptrs = reinterpret_cast<float* const*>(s_ptrs.data_ptr<int64_t>());
  p.z_ptrs = reinterpret_cast<float* const*>(z_ptrs.data_ptr<int64_t>());
  cuda::ThrowIfError(LaunchLinearAttentionDecode(p, cuda::CurrentStream()));
  return keep_alive.front();
}

}  // namespace attnserve::kernels::linear

#include "kernels/mamba2/mamba2_cuda_torch.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "kernels/common/cuda_torch_util.h"
#include "kernels/mamba2/ssd_scan_cuda.h"

namespace attnserve::kernels::mamba2 {

using cuda::CheckCudaTensor;

at::Tensor SsdScanCuda(const at::Tensor& xbc, const at::Tensor& dt, int64_t heads, int64_t groups,
                       int64_t dstate, const at::Tensor& dt_bias, const at::Tensor& a,
                       const at::Tensor& d, double dt_min, double dt_max,
                       const at::Tensor& ssm_state) {
  TORCH_CHECK(xbc.defined() && xbc.is_cuda(), "ssd scan: xbc must be a CUDA tensor");
  const at::Device device = xbc.device();
  const c10::cuda::CUDAGuard guard(device);
  CheckCudaTensor(xbc, "xbc", device, {-1, -1, -1}, {at::kFloat});
  TORCH_CHECK(xbc.is_contiguous(), "ssd scan: xbc must be contiguous");
  const int64_t batch = xbc.size(0), len = xbc.size(1);
  const int64_t d_inner = xbc.size(2) - 2 * groups * dstate;
  TORCH_CHECK(heads > 0 && d_inner > 0 && d_inner % heads == 0,
              "ssd scan: xbc's last dimension must be heads · head_dim + 2 · groups · dstate");
  const int64_t head_dim = d_inner / heads;
  CheckCudaTensor(dt, "dt", device, {batch, len, heads}, {at::kFloat});
  TORCH_CHECK(dt.stride(2) == 1, "ssd scan: dt's last dimension must be contiguous");
  for (const at::Tensor* t : {&dt_bias, &a, &d}) {
    CheckCudaTensor(*t, "dt_bias, A or D", device, {heads}, {at::kFloat});
  }
  CheckCudaTensor(ssm_state, "ssm_state", device, {batch, heads, head_dim, dstate}, {at::kFloat});
  TORCH_CHECK(ssm_state.is_contiguous(), "ssd scan: ssm_state must be contiguous");
  const at::Tensor bias_c = dt_bias.contiguous(), a_c = a.contiguous(), d_c = d.contiguous();
  at::Tensor out = at::empty({batch, len, d_inner}, xbc.options());
  const float lo = static_cast<float>(dt_min);
  const float hi = static_cast<float>(std::min(dt_max, 3.0e38));
  // The fields both kernels' params share.
  auto fill = [&](auto& p) {
    p.batch = batch;
    p.heads = heads;
    p.head_dim = head_dim;
    p.groups = groups;
    p.dstate = dstate;
    p.x = xbc.data_ptr<float>();
    p.x_batch_stride = xbc.stride(0);
    p.B = p.x + d_inner;
    p.C = p.B + groups * dstate;
    p.bc_batch_stride = xbc.stride(0);
    p.dt = dt.data_ptr<float>();
    p.dt_batch_stride = dt.stride(0);
    p.dt_bias = bias_c.data_ptr<float>();
    p.dt_min = lo;
    p.dt_max = hi;
    p.A = a_c.data_ptr<float>();
    p.D = d_c.data_ptr<float>();
    p.out = out.data_ptr<float>();
    p.state = ssm_state.data_ptr<float>();
    p.state_batch_stride = ssm_state.stride(0);
  };
  if (len == 1) {
    SsdStepCudaParams p;
    fill(p);
    cuda::ThrowIfError(LaunchSsdStep(p, cuda::CurrentStream()));
    return out;
  }
  SsdScanCudaParams p;
  fill(p);
  p.seqlen = len;
  p.x_seq_stride = xbc.stride(1);
  p.bc_seq_stride = xbc.stride(1);
  p.dt_seq_stride = dt.stride(1);
  cuda::ThrowIfError(LaunchSsdScan(p, cuda::CurrentStream()));
  return out;
}

}  // namespace attnserve::kernels::mamba2

#include "kernels/rwkv/rwkv_cuda_torch.h"

#include <ATen/ATen.h>

#include "kernels/common/cuda_torch_util.h"
#include "kernels/rwkv/wkv_cuda.h"

namespace attnserve::kernels::rwkv {

at::Tensor WkvCuda(const at::Tensor& k, const at::Tensor& v, const at::Tensor& decay,
                   const at::Tensor& first, const at::Tensor& state, const at::Tensor& out) {
  TORCH_CHECK(k.defined() && k.is_cuda(), "wkv (CUDA): k must be a CUDA tensor");
  const at::Device device = k.device();
  const c10::cuda::CUDAGuard guard(device);
  using cuda::CheckCudaTensor;
  CheckCudaTensor(k, "k", device, {-1, -1, -1}, {at::kFloat});
  const int64_t batch = k.size(0), len = k.size(1), channels = k.size(2);
  CheckCudaTensor(v, "v", device, {batch, len, channels}, {at::kFloat});
  CheckCudaTensor(decay, "decay", device, {channels}, {at::kFloat});
  CheckCudaTensor(first, "first", device, {channels}, {at::kFloat});
  CheckCudaTensor(state, "wkv state", device, {batch, 3, channels}, {at::kFloat});
  TORCH_CHECK(k.stride(2) == 1 && v.stride(2) == 1,
              "wkv (CUDA): k and v need a contiguous last dimension");
  TORCH_CHECK(state.stride(2) == 1 && state.stride(1) == channels,
              "wkv (CUDA): each row's (3, A) state block must be contiguous");
  TORCH_CHECK(decay.is_contiguous() && first.is_contiguous(),
              "wkv (CUDA): decay and first must be contiguous");
  at::Tensor result = cuda::OutputOrNew(out, "wkv out", k.sizes(), k.options());
  TORCH_CHECK(result.is_contiguous(), "wkv (CUDA): out must be contiguous");
  WkvCudaParams p;
  p.batch = batch;
  p.seqlen = len;
  p.channels = channels;
  p.k = k.data_ptr<float>();
  p.k_batch_stride = k.stride(0);
  p.k_seq_stride = k.stride(1);
  p.v = v.data_ptr<float>();
  p.v_batch_stride = v.stride(0);
  p.v_seq_stride = v.stride(1);
  p.w = decay.data_ptr<float>();
  p.u = first.data_ptr<float>();
  p.out = result.data_ptr<float>();
  p.state = state.data_ptr<float>();
  p.state_batch_stride = state.stride(0);
  cuda::ThrowIfError(LaunchWkv(p, at::cuda::getCurrentCUDAStream(device.index()).stream()));
  return result;
}

}  // namespace attnserve::kernels::rwkv

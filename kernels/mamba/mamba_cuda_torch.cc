#include "kernels/mamba/mamba_cuda_torch.h"

#include <ATen/ATen.h>

#include <vector>

#include "kernels/common/cuda_torch_util.h"
#include "kernels/mamba/causal_conv1d_cuda.h"
#include "kernels/mamba/selective_scan_cuda.h"

namespace attnserve::kernels::mamba {
namespace {

using cuda::CheckCudaTensor;
using cuda::LastDimContiguous;

// The per-channel parameters shared by prefill and decode, checked and made contiguous.
struct ScanParameters {
  at::Tensor a, d_skip, delta_bias;
};

ScanParameters CheckScanParameters(const at::Device& device, int64_t dim, const at::Tensor& a,
                                   const at::Tensor& d_skip, const at::Tensor& delta_bias) {
  CheckCudaTensor(a, "A", device, {dim, -1}, {at::kFloat});
  TORCH_CHECK(a.size(1) >= 1 && a.size(1) <= 64, "A: d_state must be in [1, 64], got ", a.size(1));
  if (d_skip.defined()) CheckCudaTensor(d_skip, "D", device, {dim}, {at::kFloat});
  if (delta_bias.defined()) CheckCudaTensor(delta_bias, "delta_bias", device, {dim}, {at::kFloat});
  return {a.contiguous(), d_skip.defined() ? d_skip.contiguous() : d_skip,
          delta_bias.defined() ? delta_bias.contiguous() : delta_bias};
}

const float* DataOrNull(const at::Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; }

void CheckStateList(const std::vector<at::Tensor>& states, const char* name,
                    const at::Device& device, int64_t sessions, int64_t rows, int64_t cols) {
  TORCH_CHECK(static_cast<int64_t>(states.size()) == sessions, name, ": expected ", sessions,
              " states (one per session), got ", states.size());
  for (const at::Tensor& s : states) {
    CheckCudaTensor(s, name, device, {rows, cols}, {at::kFloat});
    TORCH_CHECK(s.is_contiguous(), name, ": every state must be contiguous");
  }
}

}  // namespace

at::Tensor SelectiveScanCuda(const at::Tensor& u, const at::Tensor& delta,
                             const at::Tensor& delta_bias, bool delta_softplus, const at::Tensor& z,
                             const at::Tensor& b, const at::Tensor& c, const at::Tensor& a,
                             const at::Tensor& d_skip, const at::Tensor& ssm_state,
                             const at::Tensor& out) {
  TORCH_CHECK(u.defined() && u.is_cuda(), "selective scan: u must be a CUDA tensor");
  const at::Device device = u.device();
  const c10::cuda::CUDAGuard guard(device);
  CheckCudaTensor(u, "u", device, {-1, -1, -1}, {at::kFloat, at::kBFloat16});
  const int64_t batch = u.size(0), len = u.size(1), dim = u.size(2);
  const at::ScalarType dtype = u.scalar_type();
  CheckCudaTensor(delta, "delta", device, {batch, len, dim}, {dtype});
  if (z.defined()) CheckCudaTensor(z, "z", device, {batch, len, dim}, {dtype});
  const ScanParameters params = CheckScanParameters(device, dim, a, d_skip, delta_bias);
  const int64_t n = a.size(1);
  CheckCudaTensor(b, "B", device, {batch, len, n}, {dtype});
  CheckCudaTensor(c, "C", device, {batch, len, n}, {dtype});
  CheckCudaTensor(ssm_state, "ssm_state", device, {batch, dim, n}, {at::kFloat});
  TORCH_CHECK(ssm_state.stride(2) == 1 && ssm_state.stride(1) == n,
              "ssm_state: each sequence's (D, N) block must be contiguous");

  const at::Tensor u_c = LastDimContiguous(u), delta_c = LastDimContiguous(delta);
  const at::Tensor z_c = z.defined() ? LastDimContiguous(z) : z;
  const at::Tensor b_c = LastDimContiguous(b), c_c = LastDimContiguous(c);
  at::Tensor result = cuda::OutputOrNew(out, "selective scan out", {batch, len, dim}, u.options());

  SelectiveScanCudaParams p;
  p.batch = batch;
  p.seqlen = len;
  p.dim = dim;
  p.dstate = n;
  p.dtype = cuda::ToDType(dtype);
  p.u = u_c.data_ptr();
  p.u_batch_stride = u_c.stride(0);
  p.u_seq_stride = u_c.stride(1);
  p.delta = delta_c.data_ptr();
  p.delta_batch_stride = delta_c.stride(0);
  p.delta_seq_stride = delta_c.stride(1);
  p.delta_bias = DataOrNull(params.delta_bias);
  p.delta_softplus = delta_softplus;
  if (z_c.defined()) {
    p.z = z_c.data_ptr();
    p.z_batch_stride = z_c.stride(0);
    p.z_seq_stride = z_c.stride(1);
  }
  p.B = b_c.data_ptr();
  p.b_batch_stride = b_c.stride(0);
  p.b_seq_stride = b_c.stride(1);
  p.C = c_c.data_ptr();
  p.c_batch_stride = c_c.stride(0);
  p.c_seq_stride = c_c.stride(1);
  p.A = params.a.data_ptr<float>();
  p.D = DataOrNull(params.d_skip);
  p.out = result.data_ptr();
  p.out_batch_stride = result.stride(0);
  p.out_seq_stride = result.stride(1);
  p.state = ssm_state.data_ptr<float>();
  p.state_batch_stride = ssm_state.stride(0);
  cuda::ThrowIfError(LaunchSelectiveScan(p, cuda::CurrentStream()));
  return result;
}

namespace {

// Decode: everything but the states. `keep_alive` holds the tensors the params point into;
// keep_alive->front() is the output.
SelectiveStateUpdateCudaParams UpdateParams(const at::Tensor& u, const at::Tensor& delta,
                                            const at::Tensor& delta_bias, bool delta_softplus,
                                            const at::Tensor& z, const at::Tensor& b,
                                            const at::Tensor& c, const at::Tensor& a,
                                            const at::Tensor& d_skip, const at::Tensor& out,
                                            std::vector<at::Tensor>* keep_alive) {
  TORCH_CHECK(u.defined() && u.is_cuda(), "selective state update: u must be a CUDA tensor");
  const at::Device device = u.device();
  CheckCudaTensor(u, "u", device, {-1, -1}, {at::kFloat, at::kBFloat16});
  const int64_t sessions = u.size(0), dim = u.size(1);
  const at::ScalarType dtype = u.scalar_type();
  CheckCudaTensor(delta, "delta", device, {sessions, dim}, {dtype});
  if (z.defined()) CheckCudaTensor(z, "z", device, {sessions, dim}, {dtype});
  const ScanParameters params = CheckScanParameters(device, dim, a, d_skip, delta_bias);
  const int64_t n = a.size(1);
  CheckCudaTensor(b, "B", device, {sessions, n}, {dtype});
  CheckCudaTensor(c, "C", device, {sessions, n}, {dtype});
  const at::Tensor u_c = LastDimContiguous(u), delta_c = LastDimContiguous(delta);
  const at::Tensor z_c = z.defined() ? LastDimContiguous(z) : z;
  const at::Tensor b_c = LastDimContiguous(b), c_c = LastDimContiguous(c);
  at::Tensor result =
      cuda::OutputOrNew(out, "selective state update out", {sessions, dim}, u.options());
  *keep_alive = {result, u_c, delta_c, z_c, b_c, c_c, params.a, params.d_skip, params.delta_bias};

  SelectiveStateUpdateCudaParams p;
  p.batch = sessions;
  p.dim = dim;
  p.dstate = n;
  p.dtype = cuda::ToDType(dtype);
  p.u = u_c.data_ptr();
  p.u_batch_stride = u_c.stride(0);
  p.delta = delta_c.data_ptr();
  p.delta_batch_stride = delta_c.stride(0);
  p.delta_bias = DataOrNull(params.delta_bias);
  p.delta_softplus = delta_softplus;
  if (z_c.defined()) {
    p.z = z_c.data_ptr();
    p.z_batch_stride = z_c.stride(0);
  }
  p.B = b_c.data_ptr();
  p.b_batch_stride = b_c.stride(0);
  p.C = c_c.data_ptr();
  p.c_batch_stride = c_c.stride(0);
  p.A = params.a.data_ptr<float>();
  p.D = DataOrNull(params.d_skip);
  p.out = result.data_ptr();
  p.out_batch_stride = result.stride(0);
  return p;
}

}  // namespace

at::Tensor SelectiveStateUpdateCuda(const at::Tensor& u, const at::Tensor& delta,
                                    const at::Tensor& delta_bias, bool delta_softplus,
                                    const at::Tensor& z, const at::Tensor& b, const at::Tensor& c,
                                    const at::Tensor& a, const at::Tensor& d_skip,
                                    const at::Tensor& ssm_state, const at::Tensor& out) {
  TORCH_CHECK(u.defined() && u.is_cuda(), "selective state update: u must be a CUDA tensor");
  const c10::cuda::CUDAGuard guard(u.device());
  std::vector<at::Tensor> keep_alive;
  SelectiveStateUpdateCudaParams p =
      UpdateParams(u, delta, delta_bias, delta_softplus, z, b, c, a, d_skip, out, &keep_alive);
  CheckCudaTensor(ssm_state, "ssm_state", u.device(), {p.batch, p.dim, p.dstate}, {at::kFloat});
  TORCH_CHECK(ssm_state.stride(2) == 1 && ssm_state.stride(1) == p.dstate,
              "ssm_state: each session's (D, N) block must be contiguous");
  p.state = ssm_state.data_ptr<float>();
  p.state_batch_stride = ssm_state.stride(0);
  cuda::ThrowIfError(LaunchSelectiveStateUpdate(p, cuda::CurrentStream()));
  return keep_alive.front();
}

at::Tensor SelectiveStateUpdateCuda(const at::Tensor& u, const at::Tensor& delta,
                                    const at::Tensor& delta_bias, bool delta_softplus,
                                    const at::Tensor& z, const at::Tensor& b, const at::Tensor& c,
                                    const at::Tensor& a, const at::Tensor& d_skip,
                                    const std::vector<at::Tensor>& ssm_states,
                                    const at::Tensor& out) {
  TORCH_CHECK(u.defined() && u.is_cuda(), "selective state update: u must be a CUDA tensor");
  const c10::cuda::CUDAGuard guard(u.device());
  std::vector<at::Tensor> keep_alive;
  SelectiveStateUpdateCudaParams p =
      UpdateParams(u, delta, delta_bias, delta_softplus, z, b, c, a, d_skip, out, &keep_alive);
  CheckStateList(ssm_states, "ssm_state", u.device(), p.batch, p.dim, p.dstate);
  const at::Tensor pointers = cuda::DevicePointerArray(ssm_states, u.device());
  p.state_ptrs = reinterpret_cast<float* const*>(pointers.data_ptr<int64_t>());
  cuda::ThrowIfError(LaunchSelectiveStateUpdate(p, cuda::CurrentStream()));
  return keep_alive.front();
}

namespace {

// Everything but the states; keep_alive->front() is the output.
CausalConv1dCudaParams ConvParams(const at::Tensor& x, const at::Tensor& weight,
                                  const at::Tensor& bias, bool silu, const at::Tensor& out,
                                  std::vector<at::Tensor>* keep_alive) {
  TORCH_CHECK(x.defined() && x.is_cuda(), "causal conv1d: x must be a CUDA tensor");
  const at::Device device = x.device();
  TORCH_CHECK(x.dim() == 3 || x.dim() == 2, "causal conv1d: x must be (B, L, D) or (S, D), got ",
              cuda::ShapeOf(x));
  const at::Tensor x3 = LastDimContiguous(x.dim() == 2 ? x.unsqueeze(1) : x);
  CheckCudaTensor(x3, "x", device, {-1, -1, -1}, {at::kFloat, at::kBFloat16});
  const int64_t batch = x3.size(0), len = x3.size(1), dim = x3.size(2);
  CheckCudaTensor(weight, "conv weight", device, {dim, -1}, {at::kFloat});
  TORCH_CHECK(weight.size(1) >= 1 && weight.size(1) <= 8,
              "conv weight: width must be in [1, 8], "
              "got ",
              weight.size(1));
  if (bias.defined()) CheckCudaTensor(bias, "conv bias", device, {dim}, {at::kFloat});
  const at::Tensor w = weight.contiguous();
  const at::Tensor bias_c = bias.defined() ? bias.contiguous() : bias;
  at::Tensor result = cuda::OutputOrNew(out, "causal conv1d out", x.sizes(), x.options());
  const at::Tensor result3 = x.dim() == 2 ? result.unsqueeze(1) : result;
  *keep_alive = {result, x3, w, bias_c};

  CausalConv1dCudaParams p;
  p.batch = batch;
  p.seqlen = len;
  p.dim = dim;
  p.width = w.size(1);
  p.dtype = cuda::ToDType(x3.scalar_type());
  p.in = x3.data_ptr();
  p.in_batch_stride = x3.stride(0);
  p.in_seq_stride = x3.stride(1);
  p.weight = w.data_ptr<float>();
  p.bias = DataOrNull(bias_c);
  p.silu = silu;
  p.out = result3.data_ptr();
  p.out_batch_stride = result3.stride(0);
  p.out_seq_stride = result3.stride(1);
  return p;
}

}  // namespace

at::Tensor CausalConv1dCuda(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                            const at::Tensor& conv_state, bool silu, const at::Tensor& out) {
  TORCH_CHECK(x.defined() && x.is_cuda(), "causal conv1d: x must be a CUDA tensor");
  TORCH_CHECK(x.dim() == 3, "causal conv1d: x must be (B, L, D), got ", cuda::ShapeOf(x));
  const c10::cuda::CUDAGuard guard(x.device());
  std::vector<at::Tensor> keep_alive;
  CausalConv1dCudaParams p = ConvParams(x, weight, bias, silu, out, &keep_alive);
  CheckCudaTensor(conv_state, "conv_state", x.device(), {p.batch, p.dim, p.width}, {at::kFloat});
  TORCH_CHECK(conv_state.stride(2) == 1 && conv_state.stride(1) == p.width,
              "conv_state: each sequence's (D, W) block must be contiguous");
  p.state = conv_state.data_ptr<float>();
  p.state_batch_stride = conv_state.stride(0);
  cuda::ThrowIfError(LaunchCausalConv1d(p, cuda::CurrentStream()));
  return keep_alive.front();
}

at::Tensor CausalConv1dUpdateCuda(const at::Tensor& x, const at::Tensor& weight,
                                  const at::Tensor& bias,
                                  const std::vector<at::Tensor>& conv_states, bool silu,
                                  const at::Tensor& out) {
  TORCH_CHECK(x.defined() && x.is_cuda(), "causal conv1d update: x must be a CUDA tensor");
  TORCH_CHECK(x.dim() == 2, "causal conv1d update: x must be (S, D), got ", cuda::ShapeOf(x));
  const c10::cuda::CUDAGuard guard(x.device());
  std::vector<at::Tensor> keep_alive;
  CausalConv1dCudaParams p = ConvParams(x, weight, bias, silu, out, &keep_alive);
  CheckStateList(conv_states, "conv_state", x.device(), p.batch, p.dim, p.width);
  const at::Tensor pointers = cuda::DevicePointerArray(conv_states, x.device());
  p.state_ptrs = reinterpret_cast<float* const*>(pointers.data_ptr<int64_t>());
  cuda::ThrowIfError(LaunchCausalConv1d(p, cuda::CurrentStream()));
  return keep_alive.front();
}

}  // namespace attnserve::kernels::mamba

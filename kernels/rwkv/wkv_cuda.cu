#include <string>

#include "kernels/rwkv/wkv_cuda.h"

namespace attnserve::kernels::rwkv {
namespace {

constexpr int kThreads = 128;

__global__ void WkvKernel(WkvCudaParams p) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t b = blockIdx.y;
  if (c >= p.channels) return;
  float* state = p.state + b * p.state_batch_stride;
  float num = state[c], den = state[p.channels + c], pmax = state[2 * p.channels + c];
  const float w = p.w[c], u = p.u[c];
  const float* k = p.k + b * p.k_batch_stride + c;
  const float* v = p.v + b * p.v_batch_stride + c;
  float* out = p.out + b * p.seqlen * p.channels + c;
  for (int64_t t = 0; t < p.seqlen; ++t) {
    const float k_t = k[t * p.k_seq_stride], v_t = v[t * p.v_seq_stride];
    const float uk = u + k_t;
    const float q = fmaxf(pmax, uk);
    const float e1 = __expf(pmax - q), e2 = __expf(uk - q);
    out[t * p.channels] = (e1 * num + e2 * v_t) / (e1 * den + e2);
    const float pw = pmax + w;
    const float q2 = fmaxf(pw, k_t);
    const float f1 = __expf(pw - q2), f2 = __expf(k_t - q2);
    num = f1 * num + f2 * v_t;
    den = f1 * den + f2;
    pmax = q2;
  }
  state[c] = num;
  state[p.channels + c] = den;
  state[2 * p.channels + c] = pmax;
}

}  // namespace

cuda::CudaStatus LaunchWkv(const WkvCudaParams& p, cudaStream_t stream) {
  if (p.batch <= 0 || p.seqlen <= 0 || p.channels <= 0) {
    return cuda::CudaStatus::InvalidArgument(
        "wkv (CUDA): batch, seqlen and channels must be > 0, got " + std::to_string(p.batch) +
        ", " + std::to_string(p.seqlen) + ", " + std::to_string(p.channels));
  }
  if (!p.k || !p.v || !p.w || !p.u || !p.out || !p.state) {
    return cuda::CudaStatus::InvalidArgument("wkv (CUDA): a required pointer is null");
  }
  if (p.batch > 65535) {
    return cuda::CudaStatus::InvalidArgument("wkv (CUDA): batch above 65535");
  }
  const dim3 grid(static_cast<unsigned>((p.channels + kThreads - 1) / kThreads),
                  static_cast<unsigned>(p.batch));
  WkvKernel<<<grid, kThreads, 0, stream>>>(p);
  ATTNSERVE_CUDA_CHECK_LAUNCH();
  return {};
}

}  // namespace attnserve::kernels::rwkv

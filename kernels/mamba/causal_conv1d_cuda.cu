#include <cuda_bf16.h>

#include <algorithm>
#include <string>

#include "kernels/common/cuda_math.cuh"
#include "kernels/mamba/causal_conv1d_cuda.h"

namespace attnserve::kernels::mamba {
namespace {

using cuda::CudaStatus;
using cuda::DType;
using cuda::FromFloat;
using cuda::ToFloat;

constexpr int kThreads = 128;  // channels per block
constexpr int kTile = 64;      // time steps per thread

template <typename T, int kWidth>
__global__ void __launch_bounds__(kThreads) CausalConv1dKernel(CausalConv1dCudaParams p) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (c >= p.dim) return;
  const int64_t b = blockIdx.z;
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const bool first_tile = blockIdx.y == 0;
  const T* in = static_cast<const T*>(p.in) + b * p.in_batch_stride + c;
  T* out = static_cast<T*>(p.out) + b * p.out_batch_stride + c;
  float* state = (p.state_ptrs ? p.state_ptrs[b] : p.state + b * p.state_batch_stride) + c * kWidth;

  float w[kWidth];
#pragma unroll
  for (int k = 0; k < kWidth; ++k) w[k] = p.weight[c * kWidth + k];
  const float bias = p.bias ? p.bias[c] : 0.0f;

  // Only the first time tile reaches back into the state (t0 - (width - 1) >= 0 otherwise).
  float old_state[kWidth];
#pragma unroll
  for (int k = 0; k < kWidth; ++k) old_state[k] = first_tile ? state[k] : 0.0f;

  // win[k] = input at t - (width - 1) + k for the step t being computed; before the first
  // step, win[1 .. width-1] hold the width - 1 inputs before t0 (for the first tile, the
  // newest width - 1 entries of the state).
  float win[kWidth];
  win[0] = 0.0f;
#pragma unroll
  for (int k = 0; k + 1 < kWidth; ++k) {
    win[k + 1] =
        first_tile ? old_state[k + 1] : ToFloat(in[(t0 - (kWidth - 1) + k) * p.in_seq_stride]);
  }
  const int64_t t_end = min(t0 + kTile, p.seqlen);
#pragma unroll 4
  for (int64_t t = t0; t < t_end; ++t) {
#pragma unroll
    for (int k = 0; k + 1 < kWidth; ++k) win[k] = win[k + 1];
    win[kWidth - 1] = ToFloat(in[t * p.in_seq_stride]);
    float acc = bias;
#pragma unroll
    for (int k = 0; k < kWidth; ++k) acc += w[k] * win[k];
    out[t * p.out_seq_stride] = FromFloat<T>(p.silu ? cuda::Silu(acc) : acc);
  }

  if (first_tile) {
    // New state: inputs L - width .. L - 1, from the old state where that is before the chunk.
#pragma unroll
    for (int k = 0; k < kWidth; ++k) {
      const int64_t j = p.seqlen - kWidth + k;
      float v = 0.0f;
      if (j >= 0) {
        v = ToFloat(in[j * p.in_seq_stride]);
      } else {
        // old_state[kWidth + j], selected with static indices to keep it in registers.
#pragma unroll
        for (int m = 0; m < kWidth; ++m) v = m == kWidth + j ? old_state[m] : v;
      }
      state[k] = v;
    }
  }
}

template <typename T>
CudaStatus LaunchForType(const CausalConv1dCudaParams& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((p.dim + kThreads - 1) / kThreads),
                  static_cast<unsigned>((p.seqlen + kTile - 1) / kTile),
                  static_cast<unsigned>(p.batch));
  switch (p.width) {
#define ATTNSERVE_CONV_CASE(W)                                  \
  case W:                                                       \
    CausalConv1dKernel<T, W><<<grid, kThreads, 0, stream>>>(p); \
    break;
    ATTNSERVE_CONV_CASE(1)
    ATTNSERVE_CONV_CASE(2)
    ATTNSERVE_CONV_CASE(3)
    ATTNSERVE_CONV_CASE(4)
    ATTNSERVE_CONV_CASE(5)
    ATTNSERVE_CONV_CASE(6)
    ATTNSERVE_CONV_CASE(7)
    ATTNSERVE_CONV_CASE(8)
#undef ATTNSERVE_CONV_CASE
    default:
      return CudaStatus::InvalidArgument("causal conv1d: width must be in [1, 8], got " +
                                         std::to_string(p.width));
  }
  ATTNSERVE_CUDA_CHECK_LAUNCH();
  return CudaStatus();
}

}  // namespace

CudaStatus LaunchCausalConv1d(const CausalConv1dCudaParams& p, cudaStream_t stream) {
  if (p.batch < 0 || p.seqlen < 0 || p.dim <= 0 || p.width < 1 || p.width > 8) {
    return CudaStatus::InvalidArgument(
        "causal conv1d: need batch >= 0, seqlen >= 0, dim > 0, 1 <= width <= 8, got batch " +
        std::to_string(p.batch) + ", seqlen " + std::to_string(p.seqlen) + ", dim " +
        std::to_string(p.dim) + ", width " + std::to_string(p.width));
  }
  if (p.batch > 65535 || (p.seqlen + kTile - 1) / kTile > 65535) {
    return CudaStatus::InvalidArgument(
        "causal conv1d: batch (" + std::to_string(p.batch) + ") and seqlen / 64 (" +
        std::to_string((p.seqlen + kTile - 1) / kTile) + ") must be <= 65535 (grid z and y)");
  }
  if (!p.in || !p.weight || !p.out || (!p.state && !p.state_ptrs)) {
    return CudaStatus::InvalidArgument(
        "causal conv1d: in, weight, out and state (or state_ptrs) must be device pointers, got "
        "null");
  }
  if (p.batch == 0 || p.seqlen == 0) return CudaStatus();
  return p.dtype == DType::kFloat32 ? LaunchForType<float>(p, stream)
                                    : LaunchForType<__nv_bfloat16>(p, stream);
}

}  // namespace attnserve::kernels::mamba

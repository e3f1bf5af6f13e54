#include <cuda_bf16.h>

#include <string>

#include "kernels/common/cuda_math.cuh"
#include "kernels/mamba/selective_scan_cuda.h"

namespace attnserve::kernels::mamba {
namespace {

using cuda::CudaStatus;
using cuda::DType;
using cuda::FromFloat;
using cuda::kLog2e;
using cuda::ToFloat;

constexpr int kLanes = 16;        // lanes per channel: the state dimension is split over them
constexpr int kScanChannels = 4;  // channels per prefill block
constexpr int kScanThreads = kLanes * kScanChannels;
constexpr int kScanChunk = 16;  // steps per staged chunk; equals kLanes for the butterfly
static_assert(kScanChunk == kLanes, "the butterfly leaves step j of a chunk on lane j");
static_assert(kScanChunk * kScanChannels == kScanThreads, "one (step, channel) per thread");

constexpr int kUpdateChannels = 16;  // channels per decode block
constexpr int kUpdateThreads = kLanes * kUpdateChannels;

// kStates: state entries per lane, dstate <= kLanes * kStates.
template <typename T, int kStates>
__global__ void __launch_bounds__(kScanThreads) SelectiveScanKernel(SelectiveScanCudaParams p) {
  constexpr int kN = kLanes * kStates;                          // dstate padded
  constexpr int kBcPerThread = kScanChunk * kN / kScanThreads;  // B (and C) values per thread
  __shared__ float s_dt[kScanChunk][kScanChannels];
  __shared__ float s_dtu[kScanChunk][kScanChannels];   // dt · u
  __shared__ float s_skip[kScanChunk][kScanChannels];  // D · u
  __shared__ float s_gate[kScanChunk][kScanChannels];  // silu(z), or 1
  __shared__ float s_b[kScanChunk][kN];
  __shared__ float s_c[kScanChunk][kN];
  __shared__ float s_y[kScanChunk][kScanChannels];
  __shared__ float s_bias[kScanChannels], s_dskip[kScanChannels];

  const int tid = threadIdx.x;
  const int lane = tid % kLanes;
  const int ch = tid / kLanes;
  const int64_t b = blockIdx.y;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kScanChannels;
  const int64_t c = c0 + ch;
  const bool channel_ok = c < p.dim;

  const T* u = static_cast<const T*>(p.u) + b * p.u_batch_stride + c0;
  const T* delta = static_cast<const T*>(p.delta) + b * p.delta_batch_stride + c0;
  const T* z = p.z ? static_cast<const T*>(p.z) + b * p.z_batch_stride + c0 : nullptr;
  const T* bm = static_cast<const T*>(p.B) + b * p.b_batch_stride;
  const T* cm = static_cast<const T*>(p.C) + b * p.c_batch_stride;
  T* out = static_cast<T*>(p.out) + b * p.out_batch_stride + c0;
  float* state = p.state + b * p.state_batch_stride;

  if (tid < kScanChannels) {
    const bool ok = c0 + tid < p.dim;
    s_bias[tid] = ok && p.delta_bias ? p.delta_bias[c0 + tid] : 0.0f;
    s_dskip[tid] = ok && p.D ? p.D[c0 + tid] : 0.0f;
  }
  // The lane's state entries n = lane + s·16, and A·log2(e) for exp2.
  float h[kStates], a2[kStates];
#pragma unroll
  for (int s = 0; s < kStates; ++s) {
    const int n = lane + s * kLanes;
    const bool ok = channel_ok && n < p.dstate;
    h[s] = ok ? state[c * p.dstate + n] : 0.0f;
    a2[s] = ok ? p.A[c * p.dstate + n] * kLog2e : 0.0f;
  }

  // Thread tid stages step tid / 4, channel tid % 4 of each chunk, and kBcPerThread B and C
  // values. Steps past the end get dt = 0 and B = C = 0: the state passes through unchanged.
  const int my_t = tid / kScanChannels, my_c = tid % kScanChannels;
  const bool my_c_ok = c0 + my_c < p.dim;
  float r_u = 0.0f, r_delta = 0.0f, r_z = 0.0f, r_b[kBcPerThread], r_c[kBcPerThread];
  auto load_chunk = [&](int64_t t0) {
    const int64_t t = t0 + my_t;
    const bool ok = my_c_ok && t < p.seqlen;
    r_u = ok ? ToFloat(u[t * p.u_seq_stride + my_c]) : 0.0f;
    r_delta = ok ? ToFloat(delta[t * p.delta_seq_stride + my_c]) : 0.0f;
    r_z = ok && z ? ToFloat(z[t * p.z_seq_stride + my_c]) : 0.0f;
#pragma unroll
    for (int i = 0; i < kBcPerThread; ++i) {
      const int e = tid + i * kScanThreads;
      const int n = e % kN;
      const int64_t tt = t0 + e / kN;
      const bool bc_ok = tt < p.seqlen && n < p.dstate;
      r_b[i] = bc_ok ? ToFloat(bm[tt * p.b_seq_stride + n]) : 0.0f;
      r_c[i] = bc_ok ? ToFloat(cm[tt * p.c_seq_stride + n]) : 0.0f;
    }
  };
  auto stage_chunk = [&](int64_t t0) {
    const bool ok = my_c_ok && t0 + my_t < p.seqlen;
    float dt = r_delta + s_bias[my_c];
    if (p.delta_softplus) dt = cuda::Softplus(dt);
    if (!ok) dt = 0.0f;
    s_dt[my_t][my_c] = dt;
    s_dtu[my_t][my_c] = dt * r_u;
    s_skip[my_t][my_c] = s_dskip[my_c] * r_u;
    s_gate[my_t][my_c] = z ? cuda::Silu(r_z) : 1.0f;
#pragma unroll
    for (int i = 0; i < kBcPerThread; ++i) {
      const int e = tid + i * kScanThreads;
      s_b[e / kN][e % kN] = r_b[i];
      s_c[e / kN][e % kN] = r_c[i];
    }
  };

  const int64_t n_chunks = (p.seqlen + kScanChunk - 1) / kScanChunk;
  __syncthreads();  // s_bias, s_dskip
  load_chunk(0);
  for (int64_t k = 0; k < n_chunks; ++k) {
    const int64_t t0 = k * kScanChunk;
    stage_chunk(t0);
    __syncthreads();  // the chunk is staged; the previous chunk's s_y has been written out
    if (k + 1 < n_chunks) load_chunk(t0 + kScanChunk);  // in flight during the scan below

    float part[kScanChunk];  // this lane's share of Σ_n C·h, per step
#pragma unroll
    for (int t = 0; t < kScanChunk; ++t) {
      const float dt = s_dt[t][ch], dtu = s_dtu[t][ch];
      float acc = 0.0f;
#pragma unroll
      for (int s = 0; s < kStates; ++s) {
        const int n = lane + s * kLanes;
        h[s] = exp2f(dt * a2[s]) * h[s] + dtu * s_b[t][n];
        acc += s_c[t][n] * h[s];
      }
      part[t] = acc;
    }
    // Reduce-scatter over the 16 lanes of the channel: at each stage a lane keeps half of its
    // partial sums and sends the other half to its partner, so that in the end lane j holds
    // the full sum for step j (15 shuffles per 16 steps).
#pragma unroll
    for (int offset = kLanes / 2; offset > 0; offset >>= 1) {
      const bool upper = (lane & offset) != 0;
#pragma unroll
      for (int j = 0; j < offset; ++j) {
        const float send = upper ? part[j] : part[j + offset];
        const float keep = upper ? part[j + offset] : part[j];
        part[j] = keep + __shfl_xor_sync(0xffffffffu, send, offset);
      }
    }
    s_y[lane][ch] = (part[0] + s_skip[lane][ch]) * s_gate[lane][ch];
    __syncthreads();  // s_y complete; the staging buffers are free again
    if (my_c_ok && t0 + my_t < p.seqlen) {
      out[(t0 + my_t) * p.out_seq_stride + my_c] = FromFloat<T>(s_y[my_t][my_c]);
    }
  }
#pragma unroll
  for (int s = 0; s < kStates; ++s) {
    const int n = lane + s * kLanes;
    if (channel_ok && n < p.dstate) state[c * p.dstate + n] = h[s];
  }
}

template <typename T, int kStates>
__global__ void __launch_bounds__(kUpdateThreads)
    SelectiveStateUpdateKernel(SelectiveStateUpdateCudaParams p) {
  const int lane = threadIdx.x % kLanes;
  const int64_t b = blockIdx.y;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kUpdateChannels + threadIdx.x / kLanes;
  const bool ok = c < p.dim;  // no early return: the whole warp takes part in the shuffles
  float* state = p.state_ptrs ? p.state_ptrs[b] : p.state + b * p.state_batch_stride;
  float u = 0.0f, dt = 0.0f, skip = 0.0f, gate = 1.0f;
  if (ok) {
    u = ToFloat(static_cast<const T*>(p.u)[b * p.u_batch_stride + c]);
    dt = ToFloat(static_cast<const T*>(p.delta)[b * p.delta_batch_stride + c]) +
         (p.delta_bias ? p.delta_bias[c] : 0.0f);
    if (p.delta_softplus) dt = cuda::Softplus(dt);
    if (p.D) skip = p.D[c] * u;
    if (p.z) gate = cuda::Silu(ToFloat(static_cast<const T*>(p.z)[b * p.z_batch_stride + c]));
  }
  const T* bm = static_cast<const T*>(p.B) + b * p.b_batch_stride;
  const T* cm = static_cast<const T*>(p.C) + b * p.c_batch_stride;
  const float dtu = dt * u;
  float acc = 0.0f;
#pragma unroll
  for (int s = 0; s < kStates; ++s) {
    const int n = lane + s * kLanes;
    if (ok && n < p.dstate) {
      const int64_t i = c * p.dstate + n;
      const float h = exp2f(dt * p.A[i] * kLog2e) * state[i] + dtu * ToFloat(bm[n]);
      state[i] = h;
      acc += ToFloat(cm[n]) * h;
    }
  }
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset >>= 1) {
    acc += __shfl_xor_sync(0xffffffffu, acc, offset);
  }
  if (ok && lane == 0) {
    static_cast<T*>(p.out)[b * p.out_batch_stride + c] = FromFloat<T>((acc + skip) * gate);
  }
}

// Calls fn.template operator()<T, kStates>() for the runtime dtype and dstate.
template <typename Fn>
CudaStatus DispatchDtypeStates(DType dtype, int64_t dstate, Fn&& fn) {
  if (dtype == DType::kFloat32) {
    if (dstate <= 16) return fn.template operator()<float, 1>();
    if (dstate <= 32) return fn.template operator()<float, 2>();
    return fn.template operator()<float, 4>();
  }
  if (dstate <= 16) return fn.template operator()<__nv_bfloat16, 1>();
  if (dstate <= 32) return fn.template operator()<__nv_bfloat16, 2>();
  return fn.template operator()<__nv_bfloat16, 4>();
}

CudaStatus CheckSizes(int64_t batch, int64_t dim, int64_t dstate, const char* what) {
  if (batch < 0 || dim <= 0 || dstate <= 0 || dstate > 64) {
    return CudaStatus::InvalidArgument(
        std::string(what) + ": need batch >= 0, dim > 0 and 1 <= dstate <= 64, got batch " +
        std::to_string(batch) + ", dim " + std::to_string(dim) + ", dstate " +
        std::to_string(dstate));
  }
  if (batch > 65535) {
    return CudaStatus::InvalidArgument(std::string(what) + ": batch " + std::to_string(batch) +
                                       " exceeds 65535 (grid y); split the batch");
  }
  return CudaStatus();
}

// Functors rather than generic lambdas with template parameter lists (a C++20 feature).
struct ScanLaunch {
  const SelectiveScanCudaParams& p;
  cudaStream_t stream;
  template <typename T, int kStates>
  CudaStatus operator()() const {
    const dim3 grid(static_cast<unsigned>((p.dim + kScanChannels - 1) / kScanChannels),
                    static_cast<unsigned>(p.batch));
    SelectiveScanKernel<T, kStates><<<grid, kScanThreads, 0, stream>>>(p);
    ATTNSERVE_CUDA_CHECK_LAUNCH();
    return CudaStatus();
  }
};

struct UpdateLaunch {
  const SelectiveStateUpdateCudaParams& p;
  cudaStream_t stream;
  template <typename T, int kStates>
  CudaStatus operator()() const {
    const dim3 grid(static_cast<unsigned>((p.dim + kUpdateChannels - 1) / kUpdateChannels),
                    static_cast<unsigned>(p.batch));
    SelectiveStateUpdateKernel<T, kStates><<<grid, kUpdateThreads, 0, stream>>>(p);
    ATTNSERVE_CUDA_CHECK_LAUNCH();
    return CudaStatus();
  }
};

}  // namespace

CudaStatus LaunchSelectiveScan(const SelectiveScanCudaParams& p, cudaStream_t stream) {
  ATTNSERVE_CUDA_RETURN_IF_ERROR(CheckSizes(p.batch, p.dim, p.dstate, "selective scan"));
  if (p.seqlen < 0) {
    return CudaStatus::InvalidArgument("selective scan: seqlen < 0: " + std::to_string(p.seqlen));
  }
  if (!p.u || !p.delta || !p.B || !p.C || !p.A || !p.out || !p.state) {
    return CudaStatus::InvalidArgument(
        "selective scan: u, delta, B, C, A, out and state must be device pointers, got null");
  }
  if (p.batch == 0 || p.seqlen == 0) return CudaStatus();
  return DispatchDtypeStates(p.dtype, p.dstate, ScanLaunch{p, stream});
}

CudaStatus LaunchSelectiveStateUpdate(const SelectiveStateUpdateCudaParams& p,
                                      cudaStream_t stream) {
  ATTNSERVE_CUDA_RETURN_IF_ERROR(CheckSizes(p.batch, p.dim, p.dstate, "selective state update"));
  if (!p.u || !p.delta || !p.B || !p.C || !p.A || !p.out || (!p.state && !p.state_ptrs)) {
    return CudaStatus::InvalidArgument(
        "selective state update: u, delta, B, C, A, out and state (or state_ptrs) must be "
        "device pointers, got null");
  }
  if (p.batch == 0) return CudaStatus();
  return DispatchDtypeStates(p.dtype, p.dstate, UpdateLaunch{p, stream});
}

}  // namespace attnserve::kernels::mamba

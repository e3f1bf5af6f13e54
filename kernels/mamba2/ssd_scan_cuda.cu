#include <string>

#include "kernels/common/cuda_math.cuh"
#include "kernels/mamba2/ssd_scan_cuda.h"

namespace attnserve::kernels::mamba2 {
namespace {

constexpr int kChunk = 32;         // tokens a chunk of the prefill kernel
constexpr int kScanThreads = 256;  // a prefill block
constexpr int kStepThreads = 128;  // a decode block: 4 warps

__device__ __forceinline__ float StepSize(float raw, float bias, float lo, float hi) {
  return fminf(fmaxf(cuda::Softplus(raw + bias), lo), hi);
}

// Shared memory of a prefill block, in floats: the state S (P, N), the chunk's x (Q, P), B and
// C (Q, N), M (Q, Q + 1: padded against bank conflicts), dt and the cumulative dt·A (Q each).
__host__ __device__ inline int64_t ScanSharedFloats(int64_t p, int64_t n) {
  return p * n + kChunk * (p + 2 * n) + kChunk * (kChunk + 1) + 2 * kChunk;
}

__global__ void SsdScanKernel(SsdScanCudaParams p) {
  extern __shared__ float smem[];
  const int h = blockIdx.x, b = blockIdx.y, tid = threadIdx.x;
  const int P = static_cast<int>(p.head_dim), N = static_cast<int>(p.dstate);
  const int g = h / static_cast<int>(p.heads / p.groups);
  float* S = smem;                         // (P, N)
  float* xs = S + P * N;                   // (Q, P)
  float* bs = xs + kChunk * P;             // (Q, N)
  float* cs = bs + kChunk * N;             // (Q, N)
  float* m = cs + kChunk * N;              // (Q, Q + 1)
  float* dts = m + kChunk * (kChunk + 1);  // (Q)
  float* cum = dts + kChunk;               // (Q)
  float* state = p.state + b * p.state_batch_stride + static_cast<int64_t>(h) * P * N;
  for (int i = tid; i < P * N; i += blockDim.x) S[i] = state[i];
  const float a = p.A[h], d = p.D[h];
  for (int64_t c0 = 0; c0 < p.seqlen; c0 += kChunk) {
    const int q = static_cast<int>(p.seqlen - c0 < kChunk ? p.seqlen - c0 : kChunk);
    __syncthreads();  // the previous chunk's readers are done
    for (int i = tid; i < q * P; i += blockDim.x) {
      const int t = i / P, j = i % P;
      xs[i] = p.x[b * p.x_batch_stride + (c0 + t) * p.x_seq_stride + h * P + j];
    }
    for (int i = tid; i < q * N; i += blockDim.x) {
      const int t = i / N, n = i % N;
      const int64_t at = b * p.bc_batch_stride + (c0 + t) * p.bc_seq_stride + g * N + n;
      bs[i] = p.B[at];
      cs[i] = p.C[at];
    }
    if (tid < 32) {  // one warp: dt and its cumulative sum (an inclusive shuffle scan)
      float step = 0.0f;
      if (tid < q) {
        step = StepSize(p.dt[b * p.dt_batch_stride + (c0 + tid) * p.dt_seq_stride + h],
                        p.dt_bias[h], p.dt_min, p.dt_max);
      }
      float sum = step * a;
      for (int offset = 1; offset < 32; offset <<= 1) {
        const float other = __shfl_up_sync(0xffffffffu, sum, offset);
        if (tid >= offset) sum += other;
      }
      dts[tid] = step;
      cum[tid] = sum;
    }
    __syncthreads();
    // M[t, s] = (C[t]·B[s]) exp(cum[t] - cum[s]) dt[s] for s <= t, else 0.
    for (int i = tid; i < kChunk * kChunk; i += blockDim.x) {
      const int t = i / kChunk, s = i % kChunk;
      float v = 0.0f;
      if (s <= t && t < q) {
        float dot = 0.0f;
        for (int n = 0; n < N; ++n) dot += cs[t * N + n] * bs[s * N + n];
        v = dot * __expf(cum[t] - cum[s]) * dts[s];
      }
      m[t * (kChunk + 1) + s] = v;
    }
    __syncthreads();
    // y[t, j] = Σ_s M[t, s] x[s, j] + exp(cum[t]) Σ_n C[t, n] S[j, n] + D x[t, j].
    for (int i = tid; i < q * P; i += blockDim.x) {
      const int t = i / P, j = i % P;
      float y = 0.0f;
      for (int s = 0; s <= t; ++s) y += m[t * (kChunk + 1) + s] * xs[s * P + j];
      float carried = 0.0f;
      for (int n = 0; n < N; ++n) carried += cs[t * N + n] * S[j * N + n];
      y += __expf(cum[t]) * carried + d * xs[t * P + j];
      p.out[(b * p.seqlen + c0 + t) * p.heads * P + static_cast<int64_t>(h) * P + j] = y;
    }
    __syncthreads();  // S is read above and written below
    // S[j, n] = exp(cum[q-1]) S[j, n] + Σ_s exp(cum[q-1] - cum[s]) dt[s] x[s, j] B[s, n].
    const float last = cum[q - 1];
    for (int i = tid; i < P * N; i += blockDim.x) {
      const int j = i / N, n = i % N;
      float acc = 0.0f;
      for (int s = 0; s < q; ++s)
        acc += __expf(last - cum[s]) * dts[s] * xs[s * P + j] * bs[s * N + n];
      S[i] = __expf(last) * S[i] + acc;
    }
  }
  __syncthreads();
  for (int i = tid; i < P * N; i += blockDim.x) state[i] = S[i];
}

__global__ void SsdStepKernel(SsdStepCudaParams p) {
  const int h = blockIdx.x, b = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int P = static_cast<int>(p.head_dim), N = static_cast<int>(p.dstate);
  const int g = h / static_cast<int>(p.heads / p.groups);
  float* base = p.state_ptrs != nullptr ? p.state_ptrs[b] : p.state + b * p.state_batch_stride;
  float* state = base + static_cast<int64_t>(h) * P * N;
  const float dt = StepSize(p.dt[b * p.dt_batch_stride + h], p.dt_bias[h], p.dt_min, p.dt_max);
  const float decay = __expf(dt * p.A[h]);
  const float* x = p.x + b * p.x_batch_stride + static_cast<int64_t>(h) * P;
  const float* bn = p.B + b * p.bc_batch_stride + static_cast<int64_t>(g) * N;
  const float* cn = p.C + b * p.bc_batch_stride + static_cast<int64_t>(g) * N;
  for (int j = warp; j < P; j += kStepThreads / 32) {
    const float dtx = dt * x[j];
    float* row = state + static_cast<int64_t>(j) * N;
    float acc = 0.0f;
    for (int n = lane; n < N; n += 32) {
      const float s = decay * row[n] + dtx * bn[n];
      row[n] = s;
      acc += s * cn[n];
    }
    for (int offset = 16; offset > 0; offset >>= 1)
      acc += __shfl_xor_sync(0xffffffffu, acc, offset);
    if (lane == 0) p.out[b * p.heads * P + static_cast<int64_t>(h) * P + j] = acc + p.D[h] * x[j];
  }
}

cuda::CudaStatus CheckShape(int64_t batch, int64_t heads, int64_t head_dim, int64_t groups,
                            int64_t dstate) {
  if (batch <= 0 || heads <= 0 || head_dim <= 0 || groups <= 0 || dstate <= 0 ||
      heads % groups != 0 || heads > 65535 || batch > 65535) {
    return cuda::CudaStatus::InvalidArgument(
        "ssd scan: batch, heads, head_dim, groups and dstate must be > 0, heads a multiple of "
        "groups, batch and heads <= 65535");
  }
  return {};
}

}  // namespace

cuda::CudaStatus LaunchSsdScan(const SsdScanCudaParams& p, cudaStream_t stream) {
  cuda::CudaStatus status = CheckShape(p.batch, p.heads, p.head_dim, p.groups, p.dstate);
  if (!status.ok()) return status;
  if (p.seqlen <= 0) return cuda::CudaStatus::InvalidArgument("ssd scan: seqlen must be > 0");
  const size_t bytes = sizeof(float) * ScanSharedFloats(p.head_dim, p.dstate);
  int device = 0, limit = 0;
  ATTNSERVE_CUDA_CHECK(cudaGetDevice(&device));
  ATTNSERVE_CUDA_CHECK(
      cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (bytes > static_cast<size_t>(limit)) {
    return cuda::CudaStatus::InvalidArgument(
        "ssd scan: head_dim x dstate needs " + std::to_string(bytes) +
        " bytes of shared memory a block; this device allows " + std::to_string(limit));
  }
  ATTNSERVE_CUDA_CHECK(cudaFuncSetAttribute(
      SsdScanKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  const dim3 grid(static_cast<unsigned>(p.heads), static_cast<unsigned>(p.batch));
  SsdScanKernel<<<grid, kScanThreads, bytes, stream>>>(p);
  ATTNSERVE_CUDA_CHECK_LAUNCH();
  return {};
}

cuda::CudaStatus LaunchSsdStep(const SsdStepCudaParams& p, cudaStream_t stream) {
  cuda::CudaStatus status = CheckShape(p.batch, p.heads, p.head_dim, p.groups, p.dstate);
  if (!status.ok()) return status;
  const dim3 grid(static_cast<unsigned>(p.heads), static_cast<unsigned>(p.batch));
  SsdStepKernel<<<grid, kStepThreads, 0, stream>>>(p);
  ATTNSERVE_CUDA_CHECK_LAUNCH();
  return {};
}

}  // namespace attnserve::kernels::mamba2

#include <cuda_bf16.h>

#include <algorithm>
#include <cfloat>
#include <string>

#include "kernels/common/cuda_math.cuh"
#include "kernels/linear/linear_attention_cuda.h"

namespace attnserve::kernels::linear {
namespace {

using cuda::CudaStatus;
using cuda::DType;
using cuda::EluPlusOne;
using cuda::FromFloat;
using cuda::Load4;
using cuda::Store4;

constexpr int kChunk = kLinearAttentionCudaChunk;
constexpr int kThreads = 256;  // 16 × 16, each thread a 4 × 4 tile of a 64 × 64 product
constexpr int kDv = 64;        // value columns (of S, V and the output) per block
constexpr int kPad = 4;        // row padding of the transposed tiles (keeps float4 alignment)

// Shared memory of the main pass, in floats, for head dim D.
constexpr int MainSmemFloats(int d) {
  return 2 * d * (kChunk + kPad)     // φ(Q)ᵀ, φ(K)ᵀ
         + kChunk * kDv              // V
         + d * kDv                   // S (the block's columns)
         + kChunk * (kChunk + kPad)  // tril(φ(Q) φ(K)ᵀ)ᵀ
         + d + kChunk;               // z, denominators
}
constexpr int StateSmemFloats(int d) { return d * (kChunk + kPad) + kChunk * kDv + d; }

__host__ __device__ int64_t StateFloatsPerHead(int64_t d) { return d * d + d; }

__host__ __device__ bool NeedsWorkspace(const LinearAttentionCudaParams& p) {
  return p.num_segments > 1 || p.head_dim > kDv;
}

// Loads rows [t0, t0 + 64) of a (seqlen, D) matrix, columns [c0, c0 + kCols), into shared
// memory, transposed (dst[c][r], row length kChunk + kPad) when kTranspose, else as
// dst[r][c] (row length kCols). Rows past seqlen are zero. `phi` applies elu + 1 (uniform
// across the block: no divergence).
template <typename T, int kCols, bool kTranspose>
__device__ __forceinline__ void LoadTile(const T* src, int64_t seq_stride, int64_t t0,
                                         int64_t seqlen, int c0, float* dst, bool phi) {
  constexpr int kQuads = kCols / 4;
  for (int e = threadIdx.x; e < kChunk * kQuads; e += kThreads) {
    // Transposed: consecutive threads take consecutive rows, so the scattered shared stores
    // fall in distinct banks; natural: consecutive threads read consecutive quads of a row.
    const int r = kTranspose ? e % kChunk : e / kQuads;
    const int q4 = kTranspose ? e / kChunk : e % kQuads;
    float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (t0 + r < seqlen) {
      x = Load4(src + (t0 + r) * seq_stride + c0 + q4 * 4);
      if (phi) x = make_float4(EluPlusOne(x.x), EluPlusOne(x.y), EluPlusOne(x.z), EluPlusOne(x.w));
    }
    if (kTranspose) {
      constexpr int kLd = kChunk + kPad;
      dst[(q4 * 4 + 0) * kLd + r] = x.x;
      dst[(q4 * 4 + 1) * kLd + r] = x.y;
      dst[(q4 * 4 + 2) * kLd + r] = x.z;
      dst[(q4 * 4 + 3) * kLd + r] = x.w;
    } else {
      *reinterpret_cast<float4*>(dst + r * kCols + q4 * 4) = x;
    }
  }
}

// A float4 from shared or global memory (16-byte aligned).
__device__ __forceinline__ float4 Lds4(const float* p) {
  return *reinterpret_cast<const float4*>(p);
}

// The chunk range [begin, end) of segment `seg`.
__device__ __forceinline__ void SegmentChunks(const LinearAttentionCudaParams& p, int seg,
                                              int64_t* begin, int64_t* end) {
  const int64_t n_chunks = (p.seqlen + kChunk - 1) / kChunk;
  const int64_t per_segment = (n_chunks + p.num_segments - 1) / p.num_segments;
  *begin = min(n_chunks, seg * per_segment);
  *end = min(n_chunks, *begin + per_segment);
}

// Pass 1 (only with segments): ΔS, Δz of every segment but the last, into workspace slot
// seg + 1 of the (batch, head). Grid (batch·heads, num_segments - 1, D / 64).
template <typename T, int D>
__global__ void __launch_bounds__(kThreads) SegmentSumKernel(LinearAttentionCudaParams p) {
  constexpr int kRows = D / 16;  // rows of S per thread
  constexpr int kLd = kChunk + kPad;
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  float* k_t = smem;                // [D][kLd]
  float* v_s = k_t + D * kLd;       // [kChunk][kDv]
  float* z_s = v_s + kChunk * kDv;  // [D]

  const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
  const int64_t bh = blockIdx.x, b = bh / p.heads, h = bh % p.heads;
  const int seg = blockIdx.y, dv0 = blockIdx.z * kDv;
  const T* k = static_cast<const T*>(p.k) + b * p.k_batch_stride + h * p.k_head_stride;
  const T* v = static_cast<const T*>(p.v) + b * p.v_batch_stride + h * p.v_head_stride;

  float s[kRows][4] = {};
  for (int i = tid; i < D; i += kThreads) z_s[i] = 0.0f;
  int64_t begin, end;
  SegmentChunks(p, seg, &begin, &end);
  for (int64_t chunk = begin; chunk < end; ++chunk) {
    const int64_t t0 = chunk * kChunk;
    __syncthreads();
    LoadTile<T, D, true>(k, p.k_seq_stride, t0, p.seqlen, 0, k_t, p.map_features);
    LoadTile<T, kDv, false>(v, p.v_seq_stride, t0, p.seqlen, dv0, v_s, false);
    __syncthreads();
#pragma unroll 4
    for (int j = 0; j < kChunk; ++j) {
      const float4 vb = Lds4(v_s + j * kDv + tx * 4);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const float a = k_t[(ty * kRows + r) * kLd + j];
        s[r][0] += a * vb.x;
        s[r][1] += a * vb.y;
        s[r][2] += a * vb.z;
        s[r][3] += a * vb.w;
      }
    }
    if (blockIdx.z == 0) {
      for (int i = tid; i < D; i += kThreads) {
        float acc = 0.0f;
        for (int j = 0; j < kChunk; ++j) acc += k_t[i * kLd + j];
        z_s[i] += acc;
      }
    }
  }
  __syncthreads();
  float* slot = p.workspace + (bh * p.num_segments + seg + 1) * StateFloatsPerHead(D);
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    Store4(slot + (ty * kRows + r) * D + dv0 + tx * 4,
           make_float4(s[r][0], s[r][1], s[r][2], s[r][3]));
  }
  if (blockIdx.z == 0) {
    for (int i = tid; i < D; i += kThreads) slot[D * D + i] = z_s[i];
  }
}

// Pass 2: slot 0 = the incoming state, slot s = slot s - 1 + ΔS of segment s - 1.
// Grid (batch·heads, ceil((D² + D) / 256)).
__global__ void __launch_bounds__(kThreads) SegmentPrefixKernel(LinearAttentionCudaParams p) {
  const int64_t d = p.head_dim, per_head = StateFloatsPerHead(d);
  const int64_t bh = blockIdx.x, b = bh / p.heads, h = bh % p.heads;
  const int64_t e = static_cast<int64_t>(blockIdx.y) * kThreads + threadIdx.x;
  if (e >= per_head) return;
  float acc = e < d * d ? p.s_in[b * p.s_batch_stride + h * p.s_head_stride + e]
                        : p.z_in[b * p.z_batch_stride + h * p.z_head_stride + (e - d * d)];
  float* slots = p.workspace + bh * p.num_segments * per_head + e;
  slots[0] = acc;
  for (int s = 1; s < p.num_segments; ++s) {
    acc += slots[s * per_head];
    slots[s * per_head] = acc;
  }
}

// Pass 3: the outputs of one segment and 64 value columns, from the segment's start state.
// Grid (batch·heads, num_segments, D / 64).
template <typename T, int D>
__global__ void __launch_bounds__(kThreads) LinearAttentionKernel(LinearAttentionCudaParams p) {
  constexpr int kRows = D / 16;
  constexpr int kLd = kChunk + kPad;
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  float* q_t = smem;                // [D][kLd]     φ(Q)ᵀ
  float* k_t = q_t + D * kLd;       // [D][kLd]     φ(K)ᵀ
  float* v_s = k_t + D * kLd;       // [kChunk][kDv]
  float* s_s = v_s + kChunk * kDv;  // [D][kDv]     S, this block's columns
  float* a_t = s_s + D * kDv;       // [kChunk][kLd] tril(φ(Q) φ(K)ᵀ)ᵀ
  float* z_s = a_t + kChunk * kLd;  // [D]
  float* den = z_s + D;             // [kChunk]

  const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
  const int64_t bh = blockIdx.x, b = bh / p.heads, h = bh % p.heads;
  const int seg = blockIdx.y, dv0 = blockIdx.z * kDv;
  const T* q = static_cast<const T*>(p.q) + b * p.q_batch_stride + h * p.q_head_stride;
  const T* k = static_cast<const T*>(p.k) + b * p.k_batch_stride + h * p.k_head_stride;
  const T* v = static_cast<const T*>(p.v) + b * p.v_batch_stride + h * p.v_head_stride;
  T* out = static_cast<T*>(p.out) + b * p.out_batch_stride + h * p.out_head_stride;

  // Start state: the incoming one, or the segment's slot in the workspace.
  const float* s_start;
  const float* z_start;
  if (NeedsWorkspace(p)) {
    s_start = p.workspace + (bh * p.num_segments + seg) * StateFloatsPerHead(D);
    z_start = s_start + D * D;
  } else {
    s_start = p.s_in + b * p.s_batch_stride + h * p.s_head_stride;
    z_start = p.z_in + b * p.z_batch_stride + h * p.z_head_stride;
  }
  // The thread owns S rows ty·kRows + r, columns dv0 + tx·4 .. + 3, in registers; s_s holds
  // a copy for the φ(Q) S product, which every thread reads whole.
  float s[kRows][4];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const float4 x = Lds4(s_start + (ty * kRows + r) * D + dv0 + tx * 4);
    s[r][0] = x.x;
    s[r][1] = x.y;
    s[r][2] = x.z;
    s[r][3] = x.w;
    *reinterpret_cast<float4*>(s_s + (ty * kRows + r) * kDv + tx * 4) = x;
  }
  for (int i = tid; i < D; i += kThreads) z_s[i] = z_start[i];

  int64_t begin, end;
  SegmentChunks(p, seg, &begin, &end);
  for (int64_t chunk = begin; chunk < end; ++chunk) {
    const int64_t t0 = chunk * kChunk;
    __syncthreads();  // the previous chunk is done with the tiles
    LoadTile<T, D, true>(q, p.q_seq_stride, t0, p.seqlen, 0, q_t, p.map_features);
    LoadTile<T, D, true>(k, p.k_seq_stride, t0, p.seqlen, 0, k_t, p.map_features);
    LoadTile<T, kDv, false>(v, p.v_seq_stride, t0, p.seqlen, dv0, v_s, false);
    __syncthreads();

    // A = φ(Q) φ(K)ᵀ (rows ty·4 + i, columns tx·4 + j) and num = φ(Q) S in one pass over D.
    float acc_a[4][4] = {}, num[4][4] = {};
#pragma unroll 4
    for (int kk = 0; kk < D; ++kk) {
      const float4 a = Lds4(q_t + kk * kLd + ty * 4);
      const float4 kb = Lds4(k_t + kk * kLd + tx * 4);
      const float4 sb = Lds4(s_s + kk * kDv + tx * 4);
      const float av[4] = {a.x, a.y, a.z, a.w};
      const float kv[4] = {kb.x, kb.y, kb.z, kb.w};
      const float sv[4] = {sb.x, sb.y, sb.z, sb.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          acc_a[i][j] += av[i] * kv[j];
          num[i][j] += av[i] * sv[j];
        }
      }
    }
    // Causal mask within the chunk (the diagonal included), then Aᵀ to shared memory and the
    // row sums (over the 16 threads of a row, which are 16 consecutive lanes) to den.
    float row_sum[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      row_sum[i] = 0.0f;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if (tx * 4 + j > ty * 4 + i) acc_a[i][j] = 0.0f;
        row_sum[i] += acc_a[i][j];
      }
#pragma unroll
      for (int offset = 8; offset > 0; offset >>= 1) {
        row_sum[i] += __shfl_xor_sync(0xffffffffu, row_sum[i], offset);
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      *reinterpret_cast<float4*>(a_t + (tx * 4 + j) * kLd + ty * 4) =
          make_float4(acc_a[0][j], acc_a[1][j], acc_a[2][j], acc_a[3][j]);
    }
    if (tx == 0) {
#pragma unroll
      for (int i = 0; i < 4; ++i) den[ty * 4 + i] = row_sum[i];
    }
    __syncthreads();

    // num += A V; den += φ(Q) z (z before this chunk).
#pragma unroll 4
    for (int j = 0; j < kChunk; ++j) {
      const float4 a = Lds4(a_t + j * kLd + ty * 4);
      const float4 vb = Lds4(v_s + j * kDv + tx * 4);
      const float av[4] = {a.x, a.y, a.z, a.w};
      const float vv[4] = {vb.x, vb.y, vb.z, vb.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) num[i][jj] += av[i] * vv[jj];
      }
    }
    if (tid < kChunk) {
      float acc = 0.0f;
      for (int kk = 0; kk < D; ++kk) acc += q_t[kk * kLd + tid] * z_s[kk];
      // elu + 1: + ε; features given: max(den, FLT_MIN) (causal_linear_attention_cpu.h).
      den[tid] = p.map_features ? den[tid] + (acc + kLinearAttentionCudaEps)
                                : fmaxf(den[tid] + acc, FLT_MIN);
    }
    __syncthreads();  // den complete; z_s and s_s no longer read in this chunk

#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t t = t0 + ty * 4 + i;
      if (t < p.seqlen) {
        const float inv = 1.0f / den[ty * 4 + i];
        Store4(out + t * p.out_seq_stride + dv0 + tx * 4,
               make_float4(num[i][0] * inv, num[i][1] * inv, num[i][2] * inv, num[i][3] * inv));
      }
    }
    // S += φ(K)ᵀ V, z += Σ_rows φ(K) (rows past seqlen are zero).
#pragma unroll 4
    for (int j = 0; j < kChunk; ++j) {
      const float4 vb = Lds4(v_s + j * kDv + tx * 4);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const float a = k_t[(ty * kRows + r) * kLd + j];
        s[r][0] += a * vb.x;
        s[r][1] += a * vb.y;
        s[r][2] += a * vb.z;
        s[r][3] += a * vb.w;
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      *reinterpret_cast<float4*>(s_s + (ty * kRows + r) * kDv + tx * 4) =
          make_float4(s[r][0], s[r][1], s[r][2], s[r][3]);
    }
    for (int i = tid; i < D; i += kThreads) {
      float acc = 0.0f;
      for (int j = 0; j < kChunk; ++j) acc += k_t[i * kLd + j];
      z_s[i] += acc;
    }
  }

  if (seg == p.num_segments - 1) {
    __syncthreads();  // z_s complete
    float* s_out = p.s_out + b * p.s_batch_stride + h * p.s_head_stride;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      Store4(s_out + (ty * kRows + r) * D + dv0 + tx * 4,
             make_float4(s[r][0], s[r][1], s[r][2], s[r][3]));
    }
    if (blockIdx.z == 0) {
      float* z_out = p.z_out + b * p.z_batch_stride + h * p.z_head_stride;
      for (int i = tid; i < D; i += kThreads) z_out[i] = z_s[i];
    }
  }
}

template <typename T>
__global__ void LinearAttentionDecodeKernel(LinearAttentionDecodeCudaParams p) {
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  const int d = static_cast<int>(p.head_dim);
  const int groups = kThreads / d;  // row groups; blockDim.x is groups · d rounded up to 32
  float* fq = smem;                 // [d] φ(q)
  float* fk = fq + d;               // [d] φ(k)
  float* vv = fk + d;               // [d]
  float* part = vv + d;             // [groups][d]
  float* red = part + groups * d;   // [32]

  const int tid = threadIdx.x;
  const int64_t h = blockIdx.x, b = blockIdx.y;
  if (tid < d) {
    const float q_raw =
        cuda::ToFloat(static_cast<const T*>(p.q)[b * p.q_batch_stride + h * p.q_head_stride + tid]);
    const float k_raw =
        cuda::ToFloat(static_cast<const T*>(p.k)[b * p.k_batch_stride + h * p.k_head_stride + tid]);
    fq[tid] = p.map_features ? EluPlusOne(q_raw) : q_raw;
    fk[tid] = p.map_features ? EluPlusOne(k_raw) : k_raw;
    vv[tid] =
        cuda::ToFloat(static_cast<const T*>(p.v)[b * p.v_batch_stride + h * p.v_head_stride + tid]);
  }
  __syncthreads();
  float* s = (p.s_ptrs ? p.s_ptrs[b] : p.s + b * p.s_batch_stride) + h * d * d;
  float* z = (p.z_ptrs ? p.z_ptrs[b] : p.z + b * p.z_batch_stride) + h * d;
  const int col = tid % d, g = tid / d;
  if (g < groups) {
    float num = 0.0f;
    for (int kk = g; kk < d; kk += groups) {
      const float x = s[kk * d + col] + fk[kk] * vv[col];
      s[kk * d + col] = x;
      num += fq[kk] * x;
    }
    part[g * d + col] = num;
  }
  float prod = 0.0f;
  if (tid < d) {
    const float zn = z[tid] + fk[tid];
    z[tid] = zn;
    prod = fq[tid] * zn;
  }
  prod = cuda::WarpSum(prod);
  if (tid % 32 == 0) red[tid / 32] = prod;
  __syncthreads();
  if (tid < d) {
    float den = p.map_features ? kLinearAttentionCudaEps : 0.0f;
    for (int w = 0; w < (blockDim.x + 31) / 32; ++w) den += red[w];
    if (!p.map_features) den = fmaxf(den, FLT_MIN);
    float acc = 0.0f;
    for (int gg = 0; gg < groups; ++gg) acc += part[gg * d + tid];
    static_cast<T*>(p.out)[b * p.out_batch_stride + h * p.out_head_stride + tid] =
        FromFloat<T>(acc / den);
  }
}

template <typename T, int D>
CudaStatus LaunchTyped(const LinearAttentionCudaParams& p, cudaStream_t stream) {
  const unsigned bh = static_cast<unsigned>(p.batch * p.heads);
  const unsigned dv_blocks = D / kDv;
  if (p.num_segments > 1) {
    const size_t bytes = StateSmemFloats(D) * sizeof(float);
    ATTNSERVE_CUDA_CHECK(cudaFuncSetAttribute(SegmentSumKernel<T, D>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              static_cast<int>(bytes)));
    SegmentSumKernel<T, D><<<dim3(bh, p.num_segments - 1, dv_blocks), kThreads, bytes, stream>>>(p);
    ATTNSERVE_CUDA_CHECK_LAUNCH();
  }
  if (NeedsWorkspace(p)) {
    const int64_t per_head = StateFloatsPerHead(D);
    SegmentPrefixKernel<<<dim3(bh, static_cast<unsigned>((per_head + kThreads - 1) / kThreads)),
                          kThreads, 0, stream>>>(p);
    ATTNSERVE_CUDA_CHECK_LAUNCH();
  }
  const size_t bytes = MainSmemFloats(D) * sizeof(float);
  ATTNSERVE_CUDA_CHECK(cudaFuncSetAttribute(LinearAttentionKernel<T, D>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(bytes)));
  LinearAttentionKernel<T, D><<<dim3(bh, p.num_segments, dv_blocks), kThreads, bytes, stream>>>(p);
  ATTNSERVE_CUDA_CHECK_LAUNCH();
  return CudaStatus();
}

template <typename T>
CudaStatus LaunchForDim(const LinearAttentionCudaParams& p, cudaStream_t stream) {
  return p.head_dim == 64 ? LaunchTyped<T, 64>(p, stream) : LaunchTyped<T, 128>(p, stream);
}

// Vector loads need the rows of q, k, v, out aligned: 16 bytes for float32, 8 for bfloat16.
bool RowsAligned(DType dtype, const void* ptr, std::initializer_list<int64_t> strides) {
  if (!cuda::IsAligned(ptr, dtype == DType::kFloat32 ? 16 : 8)) return false;
  for (int64_t s : strides) {
    if (s % 4 != 0) return false;
  }
  return true;
}

}  // namespace

int LinearAttentionNumSegments(const LinearAttentionCudaParams& p, int sm_count) {
  const int64_t n_chunks = (p.seqlen + kChunk - 1) / kChunk;
  const int64_t blocks =
      std::max<int64_t>(1, p.batch * p.heads * std::max<int64_t>(1, p.head_dim / kDv));
  const int64_t wanted = (2 * static_cast<int64_t>(sm_count) + blocks - 1) / blocks;
  const int64_t most = std::max<int64_t>(1, std::min<int64_t>(n_chunks / 4, 1024));
  return static_cast<int>(std::max<int64_t>(1, std::min(wanted, most)));
}

int64_t LinearAttentionWorkspaceElements(const LinearAttentionCudaParams& p) {
  if (!NeedsWorkspace(p)) return 0;
  return p.batch * p.heads * p.num_segments * StateFloatsPerHead(p.head_dim);
}

CudaStatus LaunchLinearAttention(const LinearAttentionCudaParams& p, cudaStream_t stream) {
  if (p.head_dim != 64 && p.head_dim != 128) {
    return CudaStatus::InvalidArgument("linear attention (CUDA): head_dim must be 64 or 128, got " +
                                       std::to_string(p.head_dim));
  }
  if (p.batch < 0 || p.heads <= 0 || p.seqlen < 0 || p.num_segments < 1 || p.num_segments > 65535) {
    return CudaStatus::InvalidArgument(
        "linear attention (CUDA): need batch >= 0, heads > 0, seqlen >= 0, 1 <= num_segments "
        "<= 65535, got batch " +
        std::to_string(p.batch) + ", heads " + std::to_string(p.heads) + ", seqlen " +
        std::to_string(p.seqlen) + ", num_segments " + std::to_string(p.num_segments));
  }
  if (!p.q || !p.k || !p.v || !p.out || !p.s_in || !p.z_in || !p.s_out || !p.z_out ||
      (NeedsWorkspace(p) && !p.workspace)) {
    return CudaStatus::InvalidArgument(
        "linear attention (CUDA): q, k, v, out, s_in, z_in, s_out, z_out (and the workspace "
        "when num_segments > 1 or head_dim > 64) must be device pointers, got null");
  }
  if (!RowsAligned(p.dtype, p.q, {p.q_batch_stride, p.q_head_stride, p.q_seq_stride}) ||
      !RowsAligned(p.dtype, p.k, {p.k_batch_stride, p.k_head_stride, p.k_seq_stride}) ||
      !RowsAligned(p.dtype, p.v, {p.v_batch_stride, p.v_head_stride, p.v_seq_stride}) ||
      !RowsAligned(p.dtype, p.out, {p.out_batch_stride, p.out_head_stride, p.out_seq_stride}) ||
      !RowsAligned(DType::kFloat32, p.s_in, {p.s_batch_stride, p.s_head_stride}) ||
      !RowsAligned(DType::kFloat32, p.s_out, {p.s_batch_stride, p.s_head_stride})) {
    return CudaStatus::InvalidArgument(
        "linear attention (CUDA): q, k, v, out rows and S must be 16-byte (float32) or 8-byte "
        "(bfloat16) aligned with strides that are multiples of 4 elements");
  }
  if (p.batch == 0) return CudaStatus();
  if (p.seqlen == 0) {
    // Nothing to attend; the state passes through.
    if (p.s_out != p.s_in || p.z_out != p.z_in) {
      for (int64_t b = 0; b < p.batch; ++b) {
        ATTNSERVE_CUDA_CHECK(cudaMemcpy2DAsync(
            p.s_out + b * p.s_batch_stride, p.s_head_stride * sizeof(float),
            p.s_in + b * p.s_batch_stride, p.s_head_stride * sizeof(float),
            p.head_dim * p.head_dim * sizeof(float), p.heads, cudaMemcpyDeviceToDevice, stream));
        ATTNSERVE_CUDA_CHECK(cudaMemcpy2DAsync(
            p.z_out + b * p.z_batch_stride, p.z_head_stride * sizeof(float),
            p.z_in + b * p.z_batch_stride, p.z_head_stride * sizeof(float),
            p.head_dim * sizeof(float), p.heads, cudaMemcpyDeviceToDevice, stream));
      }
    }
    return CudaStatus();
  }
  return p.dtype == DType::kFloat32 ? LaunchForDim<float>(p, stream)
                                    : LaunchForDim<__nv_bfloat16>(p, stream);
}

CudaStatus LaunchLinearAttentionDecode(const LinearAttentionDecodeCudaParams& p,
                                       cudaStream_t stream) {
  if (p.batch < 0 || p.heads <= 0 || p.head_dim <= 0 || p.head_dim > 256) {
    return CudaStatus::InvalidArgument(
        "linear attention decode (CUDA): need batch >= 0, heads > 0, 0 < head_dim <= 256, got "
        "batch " +
        std::to_string(p.batch) + ", heads " + std::to_string(p.heads) + ", head_dim " +
        std::to_string(p.head_dim));
  }
  if (p.batch > 65535 || p.heads > 2147483647) {
    return CudaStatus::InvalidArgument("linear attention decode (CUDA): batch must be <= 65535");
  }
  if (!p.q || !p.k || !p.v || !p.out || (!p.s && !p.s_ptrs) || (!p.z && !p.z_ptrs)) {
    return CudaStatus::InvalidArgument(
        "linear attention decode (CUDA): q, k, v, out and the states must be device pointers, "
        "got null");
  }
  if (p.batch == 0) return CudaStatus();
  const int d = static_cast<int>(p.head_dim);
  const int groups = kThreads / d;
  const int threads = (groups * d + 31) / 32 * 32;  // whole warps for the shuffles
  const size_t bytes = (3 * d + groups * d + 32) * sizeof(float);
  const dim3 grid(static_cast<unsigned>(p.heads), static_cast<unsigned>(p.batch));
  if (p.dtype == DType::kFloat32) {
    LinearAttentionDecodeKernel<float><<<grid, threads, bytes, stream>>>(p);
  } else {
    LinearAttentionDecodeKernel<__nv_bfloat16><<<grid, threads, bytes, stream>>>(p);
  }
  ATTNSERVE_CUDA_CHECK_LAUNCH();
  return CudaStatus();
}

}  // namespace attnserve::kernels::linear

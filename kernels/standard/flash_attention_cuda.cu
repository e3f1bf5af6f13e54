#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <string>

#include "kernels/common/cuda_math.cuh"
#include "kernels/standard/flash_attention_cuda.h"
#include "kernels/standard/flash_key_tiles.h"

namespace attnserve::kernels::standard {
namespace {

using cuda::CudaStatus;
using cuda::DType;
using cuda::kLog2e;
using cuda::Load4;
using cuda::Store4;

constexpr int kBr = 64;        // queries per block
constexpr int kBc = 64;        // keys per tile
constexpr int kThreads = 256;  // 16 × 16: rows ty·4 + i, columns tx·4 + j
constexpr int kLd = kBc + 4;   // row length of the transposed tiles (float4-aligned padding)

constexpr int PrefillSmemFloats(int d) {
  return d * kLd       // Qᵀ
         + d * kLd     // Kᵀ, then V (64 × d) in the same buffer
         + kBc * kLd;  // Pᵀ
}

__device__ __forceinline__ float4 Lds4(const float* p) {
  return *reinterpret_cast<const float4*>(p);
}
__device__ __forceinline__ float4 Scale4(float4 x, float s) {
  return make_float4(x.x * s, x.y * s, x.z * s, x.w * s);
}

template <typename T, int D>
__global__ void __launch_bounds__(kThreads, 2) FlashAttentionKernel(FlashAttentionCudaParams p) {
  constexpr int kGroups = D / 64;                 // output column groups of 64 per thread row
  constexpr int kLoads = kBc * D / 4 / kThreads;  // float4 loads per thread per tile
  // D = 64: the next tile's K and this tile's V are loaded into registers while the
  // arithmetic of the current step runs. D = 128: those 8 float4s on top of the 32 output
  // accumulators would exceed the 128 registers that keep 2 blocks per SM, so the loads go
  // straight to shared memory and the other block on the SM hides their latency.
  constexpr bool kPrefetch = D <= 64;
  constexpr int kUnrollQk = D <= 64 ? 8 : 4, kUnrollPv = D <= 64 ? 4 : 2;
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  float* q_t = smem;          // [D][kLd]   Q · scale · log2(e), transposed
  float* kv = q_t + D * kLd;  // [D][kLd] Kᵀ, or [kBc][D] V
  float* p_t = kv + D * kLd;  // [kBc][kLd] Pᵀ

  const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
  const int64_t b = blockIdx.z, h = blockIdx.y;
  // Causal: the last query tiles see the most keys; start them first.
  const int64_t q_tile = p.causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int64_t q0 = q_tile * kBr;
  const T* q = static_cast<const T*>(p.q) + b * p.q_batch_stride + h * p.q_head_stride;
  const T* k = static_cast<const T*>(p.k) + b * p.k_batch_stride + h * p.k_head_stride;
  const T* v = static_cast<const T*>(p.v) + b * p.v_batch_stride + h * p.v_head_stride;
  T* out = static_cast<T*>(p.out) + b * p.out_batch_stride + h * p.out_head_stride;
  const float scale_log2 = p.softmax_scale * kLog2e;  // scores in log2 units: exp2 below

  // Transposed tiles: consecutive threads take consecutive rows (conflict-free scattered
  // shared stores); V: consecutive threads take consecutive quads of a row (coalesced).
  for (int it = 0; it < kLoads; ++it) {
    const int e = tid + it * kThreads, r = e % kBr, q4 = e / kBr;
    float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (q0 + r < p.seqlen_q) x = Scale4(Load4(q + (q0 + r) * p.q_seq_stride + q4 * 4), scale_log2);
    q_t[(q4 * 4 + 0) * kLd + r] = x.x;
    q_t[(q4 * 4 + 1) * kLd + r] = x.y;
    q_t[(q4 * 4 + 2) * kLd + r] = x.z;
    q_t[(q4 * 4 + 3) * kLd + r] = x.w;
  }

  const int64_t offset = p.seqlen_k - p.seqlen_q;  // causal: query i is at position offset + i
  // The key tiles this block walks (flash_key_tiles.h): up to the last query's position when
  // causal; with a sliding window, the sinks' tiles, then the window's.
  const KeyTiles tiles =
      PlanKeyTiles(p.seqlen_q, p.seqlen_k, p.causal, p.window, p.sinks, q0, kBr, kBc);
  const int64_t n_tiles = tiles.end, first_tile = tiles.first;
  auto next_tile = [&](int64_t t) { return tiles.next(t); };
  const bool windowed = p.window > 0;

  float o[4][4 * kGroups] = {};
  float m[4], l[4];  // running max (log2 units) and this thread's share of the running sum
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
  }
  // Global → register → shared copies of the K tile (transposed) and the V tile (natural).
  // Consecutive threads: consecutive rows for Kᵀ (conflict-free scattered shared stores),
  // consecutive quads of a row for V (coalesced).
  auto fetch_k = [&](int64_t k0, int it) {
    const int e = tid + it * kThreads, r = e % kBc, q4 = e / kBc;
    return k0 + r < p.seqlen_k ? Load4(k + (k0 + r) * p.k_seq_stride + q4 * 4)
                               : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  };
  auto put_k = [&](int it, float4 x) {
    const int e = tid + it * kThreads, r = e % kBc, q4 = e / kBc;
    kv[(q4 * 4 + 0) * kLd + r] = x.x;
    kv[(q4 * 4 + 1) * kLd + r] = x.y;
    kv[(q4 * 4 + 2) * kLd + r] = x.z;
    kv[(q4 * 4 + 3) * kLd + r] = x.w;
  };
  auto fetch_v = [&](int64_t k0, int it) {
    const int e = tid + it * kThreads, r = e / (D / 4), q4 = e % (D / 4);
    return k0 + r < p.seqlen_k ? Load4(v + (k0 + r) * p.v_seq_stride + q4 * 4)
                               : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  };
  auto put_v = [&](int it, float4 x) {
    const int e = tid + it * kThreads, r = e / (D / 4), q4 = e % (D / 4);
    *reinterpret_cast<float4*>(kv + r * D + q4 * 4) = x;
  };
  // Without prefetch: 4 loads in flight at a time, then their stores.
  auto copy_direct = [&](int64_t k0, bool is_k) {
#pragma unroll 1
    for (int it0 = 0; it0 < kLoads; it0 += 4) {
      float4 x[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) x[i] = is_k ? fetch_k(k0, it0 + i) : fetch_v(k0, it0 + i);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        if (is_k) {
          put_k(it0 + i, x[i]);
        } else {
          put_v(it0 + i, x[i]);
        }
      }
    }
  };
  float4 pre[kPrefetch ? kLoads : 1];
  if (kPrefetch) {
#pragma unroll
    for (int it = 0; it < kLoads; ++it) pre[it] = fetch_k(first_tile * kBc, it);
  }
  for (int64_t tile = first_tile; tile < n_tiles; tile = next_tile(tile)) {
    const int64_t k0 = tile * kBc;
    if (kPrefetch) {
#pragma unroll
      for (int it = 0; it < kLoads; ++it) put_k(it, pre[it]);
    } else {
      copy_direct(k0, /*is_k=*/true);
    }
    __syncthreads();  // Kᵀ (and, on the first tile, Qᵀ) in shared memory
    if (kPrefetch) {  // this tile's V: in flight during Q·Kᵀ
#pragma unroll
      for (int it = 0; it < kLoads; ++it) pre[it] = fetch_v(k0, it);
    }

    float s[4][4] = {};
#pragma unroll kUnrollQk
    for (int kk = 0; kk < D; ++kk) {
      const float4 a = Lds4(q_t + kk * kLd + ty * 4);
      const float4 kb = Lds4(kv + kk * kLd + tx * 4);
      const float av[4] = {a.x, a.y, a.z, a.w};
      const float bv[4] = {kb.x, kb.y, kb.z, kb.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) s[i][j] += av[i] * bv[j];
      }
    }
    // Keys past Lk, causal, keys after the query's position and, windowed, keys (sinks
    // aside) `window` or more before it are hidden.
    if (TileHidesKeys(p.seqlen_q, p.seqlen_k, p.causal, p.window, p.sinks, q0, kBr, k0, kBc)) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int64_t col = k0 + tx * 4 + j, row = q0 + ty * 4 + i;
          if (KeyHidden(p.seqlen_q, p.seqlen_k, p.causal, p.window, p.sinks, row, col)) {
            s[i][j] = -INFINITY;
          }
        }
      }
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float mt = fmaxf(fmaxf(s[i][0], s[i][1]), fmaxf(s[i][2], s[i][3]));
      // The 16 threads of a row are 16 consecutive lanes of one warp.
#pragma unroll
      for (int off = 8; off > 0; off >>= 1) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, off));
      const float m_new = fmaxf(m[i], mt);
      // A row that has seen no key yet (a window's first tiles can hide a whole row, padding
      // rows too) keeps max -inf: subtract 0 instead, so that exp2(-inf) = 0, never NaN.
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      const float corr = exp2f(m[i] - m_use);
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        s[i][j] = exp2f(s[i][j] - m_use);
        sum += s[i][j];
      }
      l[i] = l[i] * corr + sum;
#pragma unroll
      for (int c = 0; c < 4 * kGroups; ++c) o[i][c] *= corr;
      m[i] = m_new;
    }
    __syncthreads();  // every thread is done with Kᵀ
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      *reinterpret_cast<float4*>(p_t + (tx * 4 + j) * kLd + ty * 4) =
          make_float4(s[0][j], s[1][j], s[2][j], s[3][j]);
    }
    if (kPrefetch) {
#pragma unroll
      for (int it = 0; it < kLoads; ++it) put_v(it, pre[it]);
    } else {
      copy_direct(k0, /*is_k=*/false);
    }
    __syncthreads();                               // V and Pᵀ in shared memory
    if (kPrefetch && next_tile(tile) < n_tiles) {  // the next K tile: in flight during P·V
#pragma unroll
      for (int it = 0; it < kLoads; ++it) pre[it] = fetch_k(next_tile(tile) * kBc, it);
    }

#pragma unroll kUnrollPv
    for (int j = 0; j < kBc; ++j) {
      const float4 a = Lds4(p_t + j * kLd + ty * 4);
      const float av[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
        const float4 vb = Lds4(kv + j * D + g * 64 + tx * 4);
        const float bv[4] = {vb.x, vb.y, vb.z, vb.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
#pragma unroll
          for (int c = 0; c < 4; ++c) o[i][g * 4 + c] += av[i] * bv[c];
        }
      }
    }
    __syncthreads();  // every thread is done with V and Pᵀ
  }

#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float sum = l[i];
#pragma unroll
    for (int off = 8; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    const int64_t row = q0 + ty * 4 + i;
    if (row < p.seqlen_q) {
      const float inv = 1.0f / sum;
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
        Store4(out + row * p.out_seq_stride + g * 64 + tx * 4,
               make_float4(o[i][g * 4] * inv, o[i][g * 4 + 1] * inv, o[i][g * 4 + 2] * inv,
                           o[i][g * 4 + 3] * inv));
      }
    }
  }
}

// ---- Decode (split-K) ----

constexpr int kDecodeThreads = 128;
constexpr int kGroupLanes = 8;  // lanes that share one key row
constexpr int kDecodeGroups = kDecodeThreads / kGroupLanes;

__device__ __forceinline__ int64_t DecodeSplitLength(const FlashDecodeCudaParams& p) {
  return (p.max_seqlen + p.num_splits - 1) / p.num_splits;
}

template <typename T, int D>
__global__ void __launch_bounds__(kDecodeThreads) FlashDecodeKernel(FlashDecodeCudaParams p) {
  constexpr int kQuads = D / (4 * kGroupLanes);  // float4s per lane per row
  __shared__ float s_m[kDecodeGroups], s_l[kDecodeGroups];
  __shared__ float s_o[kDecodeGroups][D];

  const int tid = threadIdx.x, lane = tid % kGroupLanes, group = tid / kGroupLanes;
  const int split = blockIdx.x;
  const int64_t h = blockIdx.y, b = blockIdx.z;
  const int64_t len = p.seqlens ? p.seqlens[b] : p.max_seqlen;
  const int64_t chunk = DecodeSplitLength(p);
  const int64_t start = split * chunk, stop = min(len, start + chunk);

  const T* k;
  const T* v;
  if (p.k_ptrs) {
    const int64_t head_stride = p.kv_head_strides ? p.kv_head_strides[b] : p.k_head_stride;
    k = static_cast<const T*>(p.k_ptrs[b]) + h * head_stride;
    v = static_cast<const T*>(p.v_ptrs[b]) + h * head_stride;
  } else {
    k = static_cast<const T*>(p.k) + b * p.k_batch_stride + h * p.k_head_stride;
    v = static_cast<const T*>(p.v) + b * p.v_batch_stride + h * p.v_head_stride;
  }
  const T* q = static_cast<const T*>(p.q) + b * p.q_batch_stride + h * p.q_head_stride;
  const float scale_log2 = p.softmax_scale * kLog2e;
  // Lane `lane` owns dims (qd · 8 + lane) · 4 .. + 3: the 8 lanes of a group read 128
  // contiguous bytes (float32) per quad.
  float4 qv[kQuads], o[kQuads];
#pragma unroll
  for (int qd = 0; qd < kQuads; ++qd) {
    qv[qd] = Scale4(Load4(q + (qd * kGroupLanes + lane) * 4), scale_log2);
    o[qd] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  float m = -INFINITY, l = 0.0f;
  // The trip count is the same for the whole block, so every lane reaches the shuffles.
  for (int64_t base = start; base < stop; base += kDecodeGroups) {
    const int64_t t = base + group;
    const bool valid = t < stop;
    float s = 0.0f;
    if (valid) {
#pragma unroll
      for (int qd = 0; qd < kQuads; ++qd) {
        const float4 kx = Load4(k + t * p.k_seq_stride + (qd * kGroupLanes + lane) * 4);
        s += qv[qd].x * kx.x + qv[qd].y * kx.y + qv[qd].z * kx.z + qv[qd].w * kx.w;
      }
    }
#pragma unroll
    for (int off = kGroupLanes / 2; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (valid) {
      const float m_new = fmaxf(m, s);
      const float corr = exp2f(m - m_new);  // 0 on the first key (m = -inf)
      const float pe = exp2f(s - m_new);
      l = l * corr + pe;
#pragma unroll
      for (int qd = 0; qd < kQuads; ++qd) {
        const float4 vx = Load4(v + t * p.v_seq_stride + (qd * kGroupLanes + lane) * 4);
        o[qd] = make_float4(o[qd].x * corr + pe * vx.x, o[qd].y * corr + pe * vx.y,
                            o[qd].z * corr + pe * vx.z, o[qd].w * corr + pe * vx.w);
      }
      m = m_new;
    }
  }
  if (lane == 0) {
    s_m[group] = m;
    s_l[group] = l;
  }
#pragma unroll
  for (int qd = 0; qd < kQuads; ++qd) {
    *reinterpret_cast<float4*>(&s_o[group][(qd * kGroupLanes + lane) * 4]) = o[qd];
  }
  __syncthreads();
  if (tid < D) {
    float m_all = -INFINITY;
    for (int g = 0; g < kDecodeGroups; ++g) m_all = fmaxf(m_all, s_m[g]);
    float l_all = 0.0f, o_all = 0.0f;
    if (m_all != -INFINITY) {  // a split past this session's length has no keys
      for (int g = 0; g < kDecodeGroups; ++g) {
        const float w = exp2f(s_m[g] - m_all);  // 0 for a group without keys
        l_all += s_l[g] * w;
        o_all += s_o[g][tid] * w;
      }
    }
    if (p.num_splits == 1) {
      static_cast<T*>(p.out)[b * p.out_batch_stride + h * p.out_head_stride + tid] =
          cuda::FromFloat<T>(o_all / l_all);
    } else {
      float* slot = p.workspace + ((b * p.heads + h) * p.num_splits + split) * (D + 2);
      slot[tid] = o_all;
      if (tid == 0) {
        slot[D] = m_all;
        slot[D + 1] = l_all;
      }
    }
  }
}

// Grid (heads, batch), D threads: out = Σ_s o_s 2^(m_s - M) / Σ_s l_s 2^(m_s - M).
template <typename T, int D>
__global__ void __launch_bounds__(D) FlashDecodeCombineKernel(FlashDecodeCudaParams p) {
  const int64_t h = blockIdx.x, b = blockIdx.y;
  const float* slots = p.workspace + (b * p.heads + h) * p.num_splits * (D + 2);
  float m_all = -INFINITY;
  for (int s = 0; s < p.num_splits; ++s) m_all = fmaxf(m_all, slots[s * (D + 2) + D]);
  float l_all = 0.0f, o_all = 0.0f;
  for (int s = 0; s < p.num_splits; ++s) {
    const float* slot = slots + s * (D + 2);
    const float w = exp2f(slot[D] - m_all);  // split 0 always has keys: m_all is finite
    l_all += slot[D + 1] * w;
    o_all += slot[threadIdx.x] * w;
  }
  static_cast<T*>(p.out)[b * p.out_batch_stride + h * p.out_head_stride + threadIdx.x] =
      cuda::FromFloat<T>(o_all / l_all);
}

bool RowsAligned(DType dtype, const void* ptr, std::initializer_list<int64_t> strides) {
  if (ptr == nullptr || !cuda::IsAligned(ptr, dtype == DType::kFloat32 ? 16 : 8)) return false;
  for (int64_t s : strides) {
    if (s % 4 != 0) return false;
  }
  return true;
}

template <typename T, int D>
CudaStatus LaunchPrefill(FlashAttentionCudaParams p, cudaStream_t stream) {
  const size_t bytes = PrefillSmemFloats(D) * sizeof(float);
  ATTNSERVE_CUDA_CHECK(cudaFuncSetAttribute(FlashAttentionKernel<T, D>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(bytes)));
  const dim3 grid(static_cast<unsigned>((p.seqlen_q + kBr - 1) / kBr),
                  static_cast<unsigned>(p.heads), static_cast<unsigned>(p.batch));
  FlashAttentionKernel<T, D><<<grid, kThreads, bytes, stream>>>(p);
  ATTNSERVE_CUDA_CHECK_LAUNCH();
  return CudaStatus();
}

template <typename T, int D>
CudaStatus LaunchDecode(FlashDecodeCudaParams p, cudaStream_t stream) {
  FlashDecodeKernel<T, D><<<dim3(static_cast<unsigned>(p.num_splits),
                                 static_cast<unsigned>(p.heads), static_cast<unsigned>(p.batch)),
                            kDecodeThreads, 0, stream>>>(p);
  ATTNSERVE_CUDA_CHECK_LAUNCH();
  if (p.num_splits > 1) {
    FlashDecodeCombineKernel<T, D>
        <<<dim3(static_cast<unsigned>(p.heads), static_cast<unsigned>(p.batch)), D, 0, stream>>>(p);
    ATTNSERVE_CUDA_CHECK_LAUNCH();
  }
  return CudaStatus();
}

float ResolveScale(float scale, int64_t head_dim) {
  return scale != 0.0f ? scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
}

}  // namespace

CudaStatus LaunchFlashAttention(const FlashAttentionCudaParams& params, cudaStream_t stream) {
  FlashAttentionCudaParams p = params;
  if (p.head_dim != 64 && p.head_dim != 128) {
    return CudaStatus::InvalidArgument("flash attention (CUDA): head_dim must be 64 or 128, got " +
                                       std::to_string(p.head_dim));
  }
  if (p.batch < 0 || p.heads < 0 || p.seqlen_q < 0 || p.seqlen_k < 0 || p.batch > 65535 ||
      p.heads > 65535 || (p.seqlen_q + kBr - 1) / kBr > 2147483647) {
    return CudaStatus::InvalidArgument(
        "flash attention (CUDA): need 0 <= batch, heads <= 65535 and seqlens >= 0, got batch " +
        std::to_string(p.batch) + ", heads " + std::to_string(p.heads) + ", seqlen_q " +
        std::to_string(p.seqlen_q) + ", seqlen_k " + std::to_string(p.seqlen_k));
  }
  if (p.causal && p.seqlen_k < p.seqlen_q) {
    return CudaStatus::InvalidArgument(
        "flash attention (CUDA): causal attention needs seqlen_k >= seqlen_q (the queries are "
        "the last seqlen_q of the seqlen_k positions), got seqlen_q " +
        std::to_string(p.seqlen_q) + ", seqlen_k " + std::to_string(p.seqlen_k));
  }
  if (p.seqlen_q > 0 && p.seqlen_k == 0) {
    return CudaStatus::InvalidArgument("flash attention (CUDA): attention over no keys, seqlen_q " +
                                       std::to_string(p.seqlen_q) + ", seqlen_k 0");
  }
  if (p.window < 0 || p.sinks < 0 || ((p.window > 0 || p.sinks > 0) && !p.causal) ||
      (p.sinks > 0 && p.window == 0)) {
    return CudaStatus::InvalidArgument(
        "flash attention (CUDA): a window (>= 0) is causal only and sinks (>= 0) need a window, "
        "got window " +
        std::to_string(p.window) + ", sinks " + std::to_string(p.sinks) +
        (p.causal ? "" : ", not causal"));
  }
  if (p.batch == 0 || p.heads == 0 || p.seqlen_q == 0) return CudaStatus();
  if (!RowsAligned(p.dtype, p.q, {p.q_batch_stride, p.q_head_stride, p.q_seq_stride}) ||
      !RowsAligned(p.dtype, p.k, {p.k_batch_stride, p.k_head_stride, p.k_seq_stride}) ||
      !RowsAligned(p.dtype, p.v, {p.v_batch_stride, p.v_head_stride, p.v_seq_stride}) ||
      !RowsAligned(p.dtype, p.out, {p.out_batch_stride, p.out_head_stride, p.out_seq_stride})) {
    return CudaStatus::InvalidArgument(
        "flash attention (CUDA): q, k, v, out must be non-null with rows 16-byte (float32) or "
        "8-byte (bfloat16) aligned and strides that are multiples of 4 elements");
  }
  p.softmax_scale = ResolveScale(p.softmax_scale, p.head_dim);
  if (p.dtype == DType::kFloat32) {
    return p.head_dim == 64 ? LaunchPrefill<float, 64>(p, stream)
                            : LaunchPrefill<float, 128>(p, stream);
  }
  return p.head_dim == 64 ? LaunchPrefill<__nv_bfloat16, 64>(p, stream)
                          : LaunchPrefill<__nv_bfloat16, 128>(p, stream);
}

int FlashDecodeNumSplits(const FlashDecodeCudaParams& p, int sm_count) {
  const int64_t blocks = std::max<int64_t>(1, p.batch * p.heads);
  const int64_t wanted = (4 * static_cast<int64_t>(sm_count) + blocks - 1) / blocks;
  const int64_t most = std::max<int64_t>(1, std::min<int64_t>(p.max_seqlen / 256, 1024));
  return static_cast<int>(std::max<int64_t>(1, std::min(wanted, most)));
}

int64_t FlashDecodeWorkspaceElements(const FlashDecodeCudaParams& p) {
  return p.num_splits > 1 ? p.batch * p.heads * p.num_splits * (p.head_dim + 2) : 0;
}

CudaStatus LaunchFlashDecode(const FlashDecodeCudaParams& params, cudaStream_t stream) {
  FlashDecodeCudaParams p = params;
  if (p.head_dim != 64 && p.head_dim != 128) {
    return CudaStatus::InvalidArgument("flash decode (CUDA): head_dim must be 64 or 128, got " +
                                       std::to_string(p.head_dim));
  }
  if (p.batch < 0 || p.heads < 0 || p.batch > 65535 || p.heads > 65535 || p.max_seqlen < 1 ||
      p.num_splits < 1 || p.num_splits > 65535) {
    return CudaStatus::InvalidArgument(
        "flash decode (CUDA): need 0 <= batch, heads <= 65535, max_seqlen >= 1 and 1 <= "
        "num_splits <= 65535, got batch " +
        std::to_string(p.batch) + ", heads " + std::to_string(p.heads) + ", max_seqlen " +
        std::to_string(p.max_seqlen) + ", num_splits " + std::to_string(p.num_splits));
  }
  if (p.batch == 0 || p.heads == 0) return CudaStatus();
  const bool pointer_mode = p.k_ptrs != nullptr || p.v_ptrs != nullptr;
  if (pointer_mode ? (!p.k_ptrs || !p.v_ptrs) : (!p.k || !p.v)) {
    return CudaStatus::InvalidArgument(
        "flash decode (CUDA): give both k_ptrs and v_ptrs, or both k and v");
  }
  // Pointer mode: the per-session pointers cannot be checked here (they are on the device).
  if (!RowsAligned(p.dtype, p.q, {p.q_batch_stride, p.q_head_stride}) ||
      !RowsAligned(p.dtype, p.out, {p.out_batch_stride, p.out_head_stride}) ||
      !RowsAligned(p.dtype, pointer_mode ? p.q : p.k,
                   {p.k_batch_stride, p.k_head_stride, p.k_seq_stride}) ||
      !RowsAligned(p.dtype, pointer_mode ? p.q : p.v,
                   {p.v_batch_stride, p.v_head_stride, p.v_seq_stride})) {
    return CudaStatus::InvalidArgument(
        "flash decode (CUDA): q, k, v, out must be non-null with rows 16-byte (float32) or "
        "8-byte (bfloat16) aligned and strides that are multiples of 4 elements");
  }
  if (p.num_splits > 1 && p.workspace == nullptr) {
    return CudaStatus::InvalidArgument(
        "flash decode (CUDA): num_splits > 1 needs a workspace of "
        "FlashDecodeWorkspaceElements(params) floats, got null");
  }
  p.softmax_scale = ResolveScale(p.softmax_scale, p.head_dim);
  if (p.dtype == DType::kFloat32) {
    return p.head_dim == 64 ? LaunchDecode<float, 64>(p, stream)
                            : LaunchDecode<float, 128>(p, stream);
  }
  return p.head_dim == 64 ? LaunchDecode<__nv_bfloat16, 64>(p, stream)
                          : LaunchDecode<__nv_bfloat16, 128>(p, stream);
}

}  // namespace attnserve::kernels::standard

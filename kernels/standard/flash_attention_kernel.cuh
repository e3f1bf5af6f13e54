// The FlashAttention prefill kernel of flash_attention_cuda.h, shared by the mixers whose
// attention is softmax attention over a subset of the keys: a template over a Walk, the
// host-and-device plan that says which queries a block holds, which key rows a tile's columns
// are and which scores are hidden. flash_attention_cuda.cu instantiates it with the dense
// walk (full, causal and sliding-window attention: flash_key_tiles.h); kernels/sparse/
// sparse_attention_cuda.cu with the Sparse Transformer's (sparse_flash_walk.h). Only .cu files
// include this header.
//
// A Walk is a small copyable struct (a kernel argument) with, for blocks of kBr query rows
// and key tiles of kBc columns:
//   Block PlanBlock(int64_t block) const;  // block: blockIdx.x, causal walks heaviest first
//   int64_t QueryRow(const Block&, int64_t r) const;  // q/out row of the block's row r, or -1
//   int64_t FirstTile(const Block&) const, EndTile(const Block&) const;
//   int64_t NextTile(const Block&, int64_t tile) const;  // tiles visited, increasing
//   int64_t KeyRow(const Block&, int64_t col) const;      // k/v row of column col, or -1
//   bool TileHides(const Block&, int64_t k0) const;       // false: no score of the tile hidden
//   bool Hidden(const Block&, int64_t r, int64_t col) const;
//   const float* partial_in() const; float* partial_out() const;  // two-pass state, or null
// Partial state (a walk in two passes over the same queries, e.g. two key layouts): per
// (batch, head, query row) D + 2 floats, the unnormalised output, then the running max (log2
// units) and sum: (batch, heads, seqlen_q, D + 2), contiguous. partial_out: the kernel writes
// it instead of the output; partial_in: the kernel starts from it.
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "kernels/common/cuda_math.cuh"
#include "kernels/standard/flash_attention_cuda.h"

namespace attnserve::kernels::standard::flash_detail {

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

template <int D>
__device__ __forceinline__ int64_t PartialOffset(const FlashAttentionCudaParams& p, int64_t b,
                                                 int64_t h, int64_t row) {
  return ((b * p.heads + h) * p.seqlen_q + row) * (D + 2);
}

template <typename T, int D, typename Walk>
__global__ void __launch_bounds__(kThreads, 2)
    FlashAttentionKernel(FlashAttentionCudaParams p, Walk walk) {
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
  const typename Walk::Block block = walk.PlanBlock(q_tile);
  const T* q = static_cast<const T*>(p.q) + b * p.q_batch_stride + h * p.q_head_stride;
  const int64_t kv_h = p.kv_heads > 0 ? h / (p.heads / p.kv_heads) : h;  // GQA: the group's
  const T* k = static_cast<const T*>(p.k) + b * p.k_batch_stride + kv_h * p.k_head_stride;
  const T* v = static_cast<const T*>(p.v) + b * p.v_batch_stride + kv_h * p.v_head_stride;
  T* out = static_cast<T*>(p.out) + b * p.out_batch_stride + h * p.out_head_stride;
  const float scale_log2 = p.softmax_scale * kLog2e;  // scores in log2 units: exp2 below

  // Transposed tiles: consecutive threads take consecutive rows (conflict-free scattered
  // shared stores); V: consecutive threads take consecutive quads of a row (coalesced).
  for (int it = 0; it < kLoads; ++it) {
    const int e = tid + it * kThreads, r = e % kBr, q4 = e / kBr;
    float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const int64_t row = walk.QueryRow(block, r);
    if (row >= 0) x = Scale4(Load4(q + row * p.q_seq_stride + q4 * 4), scale_log2);
    q_t[(q4 * 4 + 0) * kLd + r] = x.x;
    q_t[(q4 * 4 + 1) * kLd + r] = x.y;
    q_t[(q4 * 4 + 2) * kLd + r] = x.z;
    q_t[(q4 * 4 + 3) * kLd + r] = x.w;
  }

  // The key tiles this block walks, in increasing order (the walk's plan).
  const int64_t n_tiles = walk.EndTile(block), first_tile = walk.FirstTile(block);
  auto next_tile = [&](int64_t t) { return walk.NextTile(block, t); };

  float o[4][4 * kGroups] = {};
  float m[4], l[4];  // running max (log2 units) and this thread's share of the running sum
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
  }
  // A second pass over the same queries starts from the first's softmax state (Partial).
  if (walk.partial_in() != nullptr) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t row = walk.QueryRow(block, ty * 4 + i);
      if (row < 0) continue;
      const float* slot = walk.partial_in() + PartialOffset<D>(p, b, h, row);
      m[i] = slot[D];
      l[i] = tx == 0 ? slot[D + 1] : 0.0f;  // one lane of the 16 holds the row's sum
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
#pragma unroll
        for (int c = 0; c < 4; ++c) o[i][g * 4 + c] = slot[g * 64 + tx * 4 + c];
      }
    }
  }
  // Global → register → shared copies of the K tile (transposed) and the V tile (natural).
  // Consecutive threads: consecutive rows for Kᵀ (conflict-free scattered shared stores),
  // consecutive quads of a row for V (coalesced).
  auto fetch_k = [&](int64_t k0, int it) {
    const int e = tid + it * kThreads, r = e % kBc, q4 = e / kBc;
    const int64_t key = walk.KeyRow(block, k0 + r);
    return key >= 0 ? Load4(k + key * p.k_seq_stride + q4 * 4)
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
    const int64_t key = walk.KeyRow(block, k0 + r);
    return key >= 0 ? Load4(v + key * p.v_seq_stride + q4 * 4)
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
    // The walk's mask: only in tiles where some query may not see some key.
    if (walk.TileHides(block, k0)) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if (walk.Hidden(block, ty * 4 + i, k0 + tx * 4 + j)) s[i][j] = -INFINITY;
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
    const int64_t row = walk.QueryRow(block, ty * 4 + i);
    if (row >= 0 && walk.partial_out() != nullptr) {
      // A first pass: the unnormalised state, the second pass goes on from it.
      float* slot = walk.partial_out() + PartialOffset<D>(p, b, h, row);
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
#pragma unroll
        for (int c = 0; c < 4; ++c) slot[g * 64 + tx * 4 + c] = o[i][g * 4 + c];
      }
      if (tx == 0) {
        slot[D] = m[i];
        slot[D + 1] = sum;
      }
    } else if (row >= 0) {
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

inline bool RowsAligned(DType dtype, const void* ptr, std::initializer_list<int64_t> strides) {
  if (ptr == nullptr || !cuda::IsAligned(ptr, dtype == DType::kFloat32 ? 16 : 8)) return false;
  for (int64_t s : strides) {
    if (s % 4 != 0) return false;
  }
  return true;
}

inline float ResolveScale(float scale, int64_t head_dim) {
  return scale != 0.0f ? scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
}

// Grid (blocks, heads, batch), kThreads threads, the walk's plan; p already checked (head_dim
// 64 or 128 as D, rows aligned, softmax_scale resolved).
template <typename T, int D, typename Walk>
CudaStatus LaunchFlashWalk(const FlashAttentionCudaParams& p, const Walk& walk, int64_t blocks,
                           cudaStream_t stream) {
  const size_t bytes = PrefillSmemFloats(D) * sizeof(float);
  ATTNSERVE_CUDA_CHECK(cudaFuncSetAttribute(FlashAttentionKernel<T, D, Walk>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(bytes)));
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(p.heads),
                  static_cast<unsigned>(p.batch));
  FlashAttentionKernel<T, D, Walk><<<grid, kThreads, bytes, stream>>>(p, walk);
  ATTNSERVE_CUDA_CHECK_LAUNCH();
  return CudaStatus();
}

// LaunchFlashWalk for p.dtype and p.head_dim (64 or 128).
template <typename Walk>
CudaStatus DispatchFlashWalk(const FlashAttentionCudaParams& p, const Walk& walk, int64_t blocks,
                             cudaStream_t stream) {
  if (p.dtype == DType::kFloat32) {
    return p.head_dim == 64 ? LaunchFlashWalk<float, 64>(p, walk, blocks, stream)
                            : LaunchFlashWalk<float, 128>(p, walk, blocks, stream);
  }
  return p.head_dim == 64 ? LaunchFlashWalk<__nv_bfloat16, 64>(p, walk, blocks, stream)
                          : LaunchFlashWalk<__nv_bfloat16, 128>(p, walk, blocks, stream);
}

}  // namespace attnserve::kernels::standard::flash_detail

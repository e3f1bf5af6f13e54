#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <string>

#include "kernels/common/cuda_math.cuh"
#include "kernels/standard/flash_attention_cuda.h"
#include "kernels/standard/flash_attention_kernel.cuh"
#include "kernels/standard/flash_key_tiles.h"

namespace attnserve::kernels::standard {
namespace {

using cuda::CudaStatus;
using cuda::DType;
using cuda::kLog2e;
using cuda::Load4;
using cuda::Store4;
using flash_detail::kBc;
using flash_detail::kBr;
using flash_detail::ResolveScale;
using flash_detail::RowsAligned;
using flash_detail::Scale4;

// Full, causal or sliding-window attention (flash_key_tiles.h): a block holds queries q0 ..
// q0 + kBr - 1 of the natural layout, a tile's columns are key positions, and the tiles visited
// are PlanKeyTiles'. Causal blocks skip the key tiles wholly above the diagonal; windowed ones
// visit the sinks' tiles, then the window's.
struct DenseWalk {
  struct Block {
    int64_t q0 = 0;
    KeyTiles tiles;
  };

  explicit DenseWalk(const FlashAttentionCudaParams& p)
      : seqlen_q(p.seqlen_q),
        seqlen_k(p.seqlen_k),
        window(p.window),
        sinks(p.sinks),
        causal(p.causal) {}

  __device__ Block PlanBlock(int64_t q_tile) const {
    Block b;
    b.q0 = q_tile * kBr;
    b.tiles = PlanKeyTiles(seqlen_q, seqlen_k, causal, window, sinks, b.q0, kBr, kBc);
    return b;
  }
  __device__ int64_t QueryRow(const Block& b, int64_t r) const {
    return b.q0 + r < seqlen_q ? b.q0 + r : -1;
  }
  __device__ int64_t FirstTile(const Block& b) const { return b.tiles.first; }
  __device__ int64_t EndTile(const Block& b) const { return b.tiles.end; }
  __device__ int64_t NextTile(const Block& b, int64_t t) const { return b.tiles.next(t); }
  __device__ int64_t KeyRow(const Block&, int64_t col) const { return col < seqlen_k ? col : -1; }
  // Keys past Lk, causal, keys after the query's position and, windowed, keys (sinks aside)
  // `window` or more before it are hidden.
  __device__ bool TileHides(const Block& b, int64_t k0) const {
    return TileHidesKeys(seqlen_q, seqlen_k, causal, window, sinks, b.q0, kBr, k0, kBc);
  }
  __device__ bool Hidden(const Block& b, int64_t r, int64_t col) const {
    return KeyHidden(seqlen_q, seqlen_k, causal, window, sinks, b.q0 + r, col);
  }
  __device__ const float* partial_in() const { return nullptr; }
  __device__ float* partial_out() const { return nullptr; }

  int64_t seqlen_q, seqlen_k, window, sinks;
  bool causal;
};

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
  const int64_t kv_h = p.kv_heads > 0 ? h / (p.heads / p.kv_heads) : h;  // GQA: the group's
  const int64_t len = p.seqlens ? p.seqlens[b] : p.max_seqlen;
  const int64_t chunk = DecodeSplitLength(p);
  const int64_t start = split * chunk, stop = min(len, start + chunk);

  const T* k;
  const T* v;
  if (p.k_ptrs) {
    const int64_t head_stride = p.kv_head_strides ? p.kv_head_strides[b] : p.k_head_stride;
    k = static_cast<const T*>(p.k_ptrs[b]) + kv_h * head_stride;
    v = static_cast<const T*>(p.v_ptrs[b]) + kv_h * head_stride;
  } else {
    k = static_cast<const T*>(p.k) + b * p.k_batch_stride + kv_h * p.k_head_stride;
    v = static_cast<const T*>(p.v) + b * p.v_batch_stride + kv_h * p.v_head_stride;
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
  return flash_detail::DispatchFlashWalk(p, DenseWalk(p), (p.seqlen_q + kBr - 1) / kBr, stream);
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

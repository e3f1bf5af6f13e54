// Softmax attention on an NVIDIA GPU with an online softmax (FlashAttention): the math of
// flash_attention_cpu.h, out = softmax(q kᵀ · scale + mask) v per batch and head, never an
// Lq × Lk matrix in global memory.
//
// Params-struct convention as flash-attention's csrc/flash_attn: device pointers, sizes and
// strides in elements (the last dimension of every tensor contiguous), no torch types; a
// launcher that takes the struct and a stream. The caller owns all buffers; work is enqueued
// on `stream`. q, k, v, out are float32 or bfloat16 (`dtype`); scores, the softmax and the
// accumulation are float32. head_dim 64 or 128 (others: InvalidArgument). Rows must be
// 16-byte (float32) or 8-byte (bfloat16) aligned, strides multiples of 4 elements.
// Torch-facing wrappers: flash_attention_cuda_torch.h. The prefill kernel is a template over a
// tile walk (flash_attention_kernel.cuh), shared with the sparse mixer (kernels/sparse/
// sparse_attention_cuda.h); LaunchFlashAttention runs it with the dense walk described below.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/cuda_check.h"

namespace attnserve::kernels::standard {

// Prefill. Launch: grid (ceil(Lq / 64), heads, batch), 256 threads; a block owns 64 queries
// of one head and walks the key tiles of 64 (Q·Kᵀ and P·V as 4 × 4 register tiles per
// thread from shared memory, K and V through one shared buffer, the next tile's global loads
// in flight during the current tile's arithmetic). Causal blocks skip the key tiles wholly
// above the diagonal and run heaviest first.
//   causal = false: every query sees every key.
//   causal = true: the queries are the last Lq of Lk positions (a chunk after a KV prefix of
//   Lk - Lq tokens): query i sees keys 0 .. Lk - Lq + i. Requires Lk >= Lq.
//   window > 0 (causal only): sliding-window attention as flash_attention_cpu.h computes it,
//   query i sees only keys Lk - Lq + i - window + 1 .. Lk - Lq + i, and with sinks > 0 also those
//   of keys 0 .. sinks - 1 at or before its position (attention sinks); a block visits the sinks'
//   tiles, then the window's, so the cost is O(Lq · (window + sinks)).
struct FlashAttentionCudaParams {
  int64_t batch = 0, heads = 0, seqlen_q = 0, seqlen_k = 0, head_dim = 0;
  // Key/value heads (grouped-query attention: heads a multiple of it; query head h reads key
  // and value head h / (heads / kv_heads)); 0: heads.
  int64_t kv_heads = 0;
  cuda::DType dtype = cuda::DType::kFloat32;
  bool causal = true;
  int64_t window = 0;          // 0: none
  int64_t sinks = 0;           // only with a window
  float softmax_scale = 0.0f;  // 0: 1 / sqrt(head_dim)

  const void* q = nullptr;  // (batch, heads, seqlen_q, head_dim)
  int64_t q_batch_stride = 0, q_head_stride = 0, q_seq_stride = 0;
  const void* k = nullptr;  // (batch, kv_heads, seqlen_k, head_dim), e.g. a view of a KV cache
  int64_t k_batch_stride = 0, k_head_stride = 0, k_seq_stride = 0;
  const void* v = nullptr;  // (batch, kv_heads, seqlen_k, head_dim)
  int64_t v_batch_stride = 0, v_head_stride = 0, v_seq_stride = 0;
  void* out = nullptr;  // (batch, heads, seqlen_q, head_dim); must not overlap the inputs
  int64_t out_batch_stride = 0, out_head_stride = 0, out_seq_stride = 0;
};

cuda::CudaStatus LaunchFlashAttention(const FlashAttentionCudaParams& params, cudaStream_t stream);

// Decode over KV caches, split-K (flash-decoding): one query token per (session, head)
// attends to the session's first seqlens[b] cached keys (the caller has already written the
// new token's k and v at position seqlens[b] - 1). Launch: grid (num_splits, heads, batch),
// 128 threads: each block reduces one slice of the keys with 16 groups of 8 lanes (a group
// reads one 256- or 512-byte key row per step, coalesced), and writes a partial (max, sum,
// unnormalised output) to the workspace; a second kernel, grid (heads, batch), combines the
// splits. With num_splits = 1 the first kernel writes the output directly.
struct FlashDecodeCudaParams {
  int64_t batch = 0, heads = 0, head_dim = 0;
  int64_t kv_heads = 0;  // the caches' heads (grouped-query attention, as above); 0: heads
  cuda::DType dtype = cuda::DType::kFloat32;
  float softmax_scale = 0.0f;  // 0: 1 / sqrt(head_dim)

  const void* q = nullptr;  // (batch, heads, head_dim)
  int64_t q_batch_stride = 0, q_head_stride = 0;
  void* out = nullptr;  // (batch, heads, head_dim)
  int64_t out_batch_stride = 0, out_head_stride = 0;

  // The caches, rows of head_dim elements seq_stride apart, in one of two forms:
  //   k_ptrs, v_ptrs != null: device arrays of `batch` device pointers, session b's cache
  //     (kv_heads, capacity_b, head_dim) at k_ptrs[b], heads kv_head_strides[b] elements apart
  //     (a device array; null: k_head_stride for every session) — caches of any capacities
  //     wherever the session table keeps them;
  //   otherwise one batched cache k + b·k_batch_stride + h·k_head_stride (same for v).
  const void* const* k_ptrs = nullptr;
  const void* const* v_ptrs = nullptr;
  const int64_t* kv_head_strides = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t k_batch_stride = 0, k_head_stride = 0, k_seq_stride = 0;
  int64_t v_batch_stride = 0, v_head_stride = 0, v_seq_stride = 0;

  // Valid keys per session, a device array of `batch` int32 values in [1, max_seqlen]; null:
  // max_seqlen for every session.
  const int32_t* seqlens = nullptr;
  int64_t max_seqlen = 0;

  // Splits of the key range (>= 1) and, when > 1, a float32 workspace of
  // FlashDecodeWorkspaceElements(params) elements owned by the caller.
  int num_splits = 1;
  float* workspace = nullptr;
};

// A split count that gives about 4 blocks per multiprocessor, with at least 256 keys a split.
int FlashDecodeNumSplits(const FlashDecodeCudaParams& params, int sm_count);

// Floats of workspace for params.num_splits (0 when it is 1).
int64_t FlashDecodeWorkspaceElements(const FlashDecodeCudaParams& params);

cuda::CudaStatus LaunchFlashDecode(const FlashDecodeCudaParams& params, cudaStream_t stream);

}  // namespace attnserve::kernels::standard

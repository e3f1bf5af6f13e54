// Causal linear attention on an NVIDIA GPU, the math of causal_linear_attention_cpu.h:
//   φ(x) = elu(x) + 1 (or the identity, for q and k that are features already: map_features),  o_t
//   = φ(q_t)ᵀ S_t / (φ(q_t)ᵀ z_t + ε),  ε = 1e-6, S_t = S_0 + Σ_{i≤t} φ(k_i) v_iᵀ (d × d, S[i][j] =
//   Σ φ(k)_i v_j),  z_t = z_0 + Σ_{i≤t} φ(k_i); for features given, max(φ(q_t)ᵀ z_t, FLT_MIN)
//   instead of + ε (kPositiveNormaliserFloor in causal_linear_attention_cpu.h).
//
// Prefill, chunks of 64 tokens: within a chunk the masked quadratic form
//   O_c = (φ(Q_c) S + tril(φ(Q_c) φ(K_c)ᵀ) V_c) / (φ(Q_c) z + rowsum(tril(...)) + ε),
// then S += φ(K_c)ᵀ V_c, z += Σ φ(K_c), with S and z kept in shared memory between chunks.
// One block per (64 value columns, sequence segment, batch·head), 256 threads, 4×4 register
// tiles. A (batch, head) alone would give too few blocks for one long sequence, so the
// sequence is cut into `num_segments` segments of whole chunks: a first pass computes each
// segment's ΔS, Δz, a second turns them into the state at the start of every segment (in
// the workspace), and the main pass runs all segments at once, each from its own start state.
// With one segment there is no workspace and no extra pass.
//
// Params-struct convention as mamba's selective_scan: device pointers, strides in elements,
// no torch types; the caller owns all buffers; work is enqueued on `stream`. q, k, v, out are
// float32 or bfloat16 (`dtype`); states, workspace and all arithmetic are float32.
// head_dim: 32, 64 or 128. Torch-facing wrappers: linear_attention_cuda_torch.h.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/cuda_check.h"

namespace attnserve::kernels::linear {

inline constexpr float kLinearAttentionCudaEps = 1e-6f;
inline constexpr int kLinearAttentionCudaChunk = 64;

struct LinearAttentionCudaParams {
  int64_t batch = 0, heads = 0, seqlen = 0, head_dim = 0;
  cuda::DType dtype = cuda::DType::kFloat32;  // of q, k, v, out

  // (batch, heads, seqlen, head_dim), last dimension contiguous.
  const void *q = nullptr, *k = nullptr, *v = nullptr;
  int64_t q_batch_stride = 0, q_head_stride = 0, q_seq_stride = 0;
  int64_t k_batch_stride = 0, k_head_stride = 0, k_seq_stride = 0;
  int64_t v_batch_stride = 0, v_head_stride = 0, v_seq_stride = 0;
  void* out = nullptr;
  int64_t out_batch_stride = 0, out_head_stride = 0, out_seq_stride = 0;

  // State carried in: S (batch, heads, d, d), z (batch, heads, d), float32, each head's block
  // contiguous. The state after the last token is written to s_out, z_out, which may be the
  // same buffers as s_in, z_in (in place: nothing reads s_in after the pass that stores it).
  const float* s_in = nullptr;
  const float* z_in = nullptr;
  int64_t s_batch_stride = 0, s_head_stride = 0;  // shared by s_in and s_out
  int64_t z_batch_stride = 0, z_head_stride = 0;  // shared by z_in and z_out
  float* s_out = nullptr;
  float* z_out = nullptr;

  // false: q and k are features already (the Performer's FAVOR+ φ, positive), used as they
  // are, and the normaliser is max(den, FLT_MIN); true: φ = elu + 1 is applied to them, + ε.
  bool map_features = true;

  // Segments (>= 1) and, when > 1, a float32 workspace of
  // LinearAttentionWorkspaceElements(params) elements owned by the caller.
  int num_segments = 1;
  float* workspace = nullptr;
};

// A segment count that fills a device with `sm_count` multiprocessors (2 blocks per SM)
// without making segments shorter than 4 chunks.
int LinearAttentionNumSegments(const LinearAttentionCudaParams& params, int sm_count);

// Floats of workspace for params.num_segments (0 when it is 1).
int64_t LinearAttentionWorkspaceElements(const LinearAttentionCudaParams& params);

cuda::CudaStatus LaunchLinearAttention(const LinearAttentionCudaParams& params,
                                       cudaStream_t stream);

// Decode: one token for each of `batch` sessions, whose states need not be adjacent.
// S += φ(k) vᵀ, z += φ(k), o = φ(q)ᵀ S / (φ(q)ᵀ z + ε) (the token sees itself).
// Launch: grid (heads, batch), (256 / head_dim) · head_dim threads: a thread owns one column
// of S and a strided share of its rows; memory-bound on reading and writing S.
// head_dim <= 256.
struct LinearAttentionDecodeCudaParams {
  int64_t batch = 0, heads = 0, head_dim = 0;
  cuda::DType dtype = cuda::DType::kFloat32;  // of q, k, v, out

  const void *q = nullptr, *k = nullptr, *v = nullptr;  // (batch, heads, head_dim)
  int64_t q_batch_stride = 0, q_head_stride = 0;
  int64_t k_batch_stride = 0, k_head_stride = 0;
  int64_t v_batch_stride = 0, v_head_stride = 0;
  void* out = nullptr;  // (batch, heads, head_dim)
  int64_t out_batch_stride = 0, out_head_stride = 0;

  // Each session's S (heads, d, d) and z (heads, d), float32 contiguous, updated in place,
  // either through device arrays of `batch` device pointers (s_ptrs, z_ptrs: states wherever
  // the session table keeps them) or, when those are null, batched tensors s + b·s_batch_stride
  // and z + b·z_batch_stride.
  float* const* s_ptrs = nullptr;
  float* const* z_ptrs = nullptr;
  float* s = nullptr;
  float* z = nullptr;
  int64_t s_batch_stride = 0, z_batch_stride = 0;

  bool map_features = true;  // as in LinearAttentionCudaParams
};

cuda::CudaStatus LaunchLinearAttentionDecode(const LinearAttentionDecodeCudaParams& params,
                                             cudaStream_t stream);

}  // namespace attnserve::kernels::linear

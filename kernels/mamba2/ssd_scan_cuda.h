// The Mamba-2 SSD scan on an NVIDIA GPU: the same math as ssd_scan_cpu.h (read its header for
// the formulas), for a sequence of any length (prefill, chunked) and for one token of many
// sessions at once (decode). Output y + D·x; the gated norm and the projections are the
// mixer's. Float32 activations, state and arithmetic.
//
// Convention (mamba csrc, as selective_scan_cuda.h): plain params structs with device
// pointers, sizes and strides in elements, no torch types; a launcher that checks what it can
// without touching the data, enqueues on `stream` and returns. The caller owns every buffer.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/cuda_check.h"

namespace attnserve::kernels::mamba2 {

// Prefill. Launch: grid (heads, batch), 256 threads, dynamic shared memory holding the head's
// state (head_dim x dstate) and one chunk of 32 tokens (x, B, C, dt and the chunk's 32 x 32
// matrix M): each block carries its head's state from chunk to chunk in shared memory and does
// a chunk's work as three products (M·x, C·Sᵀ, Bᵀ·x weighted) that its threads share. Needs
// 4·(head_dim·dstate + 32·(head_dim + 2·dstate) + 32·33 + 64) bytes of shared memory (208 KiB
// at head_dim 128, dstate 256: within an H100's 227 KiB; the launcher refuses more than the
// device allows).
struct SsdScanCudaParams {
  int64_t batch = 0, seqlen = 0, heads = 0, head_dim = 0, groups = 0, dstate = 0;
  const float* x = nullptr;  // (batch, seqlen, heads · head_dim), strides below
  int64_t x_batch_stride = 0, x_seq_stride = 0;
  const float* B = nullptr;  // (batch, seqlen, groups · dstate)
  const float* C = nullptr;
  int64_t bc_batch_stride = 0, bc_seq_stride = 0;
  const float* dt = nullptr;  // (batch, seqlen, heads), before bias, softplus and clamp
  int64_t dt_batch_stride = 0, dt_seq_stride = 0;
  const float* dt_bias = nullptr;  // (heads)
  float dt_min = 0.0f, dt_max = 3.0e38f;
  const float* A = nullptr;  // (heads): -exp(A_log)
  const float* D = nullptr;  // (heads)
  float* out = nullptr;      // (batch, seqlen, heads · head_dim) contiguous: y + D·x
  // (batch, heads, head_dim, dstate): session b's block at state + b · state_batch_stride.
  float* state = nullptr;
  int64_t state_batch_stride = 0;
};

cuda::CudaStatus LaunchSsdScan(const SsdScanCudaParams& params, cudaStream_t stream);

// Decode: one token for each of `batch` sessions. Launch: grid (heads, batch), 128 threads:
// a warp a state row at a time, its lanes over dstate (coalesced), the row's read-out reduced
// by shuffles; memory-bound on reading and writing the states. The states either one batched
// tensor (state, state_batch_stride) or, with state_ptrs, a device array of `batch` pointers,
// each to a session's (heads, head_dim, dstate) block wherever it lives.
struct SsdStepCudaParams {
  int64_t batch = 0, heads = 0, head_dim = 0, groups = 0, dstate = 0;
  const float* x = nullptr;  // (batch, heads · head_dim), rows x_batch_stride apart
  int64_t x_batch_stride = 0;
  const float* B = nullptr;  // (batch, groups · dstate)
  const float* C = nullptr;
  int64_t bc_batch_stride = 0;
  const float* dt = nullptr;  // (batch, heads)
  int64_t dt_batch_stride = 0;
  const float* dt_bias = nullptr;
  float dt_min = 0.0f, dt_max = 3.0e38f;
  const float* A = nullptr;
  const float* D = nullptr;
  float* out = nullptr;  // (batch, heads · head_dim) contiguous
  float* const* state_ptrs = nullptr;
  float* state = nullptr;
  int64_t state_batch_stride = 0;
};

cuda::CudaStatus LaunchSsdStep(const SsdStepCudaParams& params, cudaStream_t stream);

}  // namespace attnserve::kernels::mamba2

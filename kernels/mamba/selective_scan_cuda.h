// The Mamba-1 selective scan on an NVIDIA GPU: the same math as selective_scan_cpu.h, for a
// chunk of any length (prefill) and for one token of many sessions at once (decode).
//
// For every sequence b, channel d, step t (h is the state, N = dstate):
//   dt    = softplus(delta[t,d] + delta_bias[d])   (without softplus when !delta_softplus)
//   h[n]  = exp(dt · A[d,n]) · h[n] + dt · B[t,n] · u[t,d]
//   out   = (Σ_n C[t,n] · h[n] + D[d] · u[t,d]) · silu(z[t,d])   (no D term when D is null,
//                                                                  no gate when z is null)
//
// Convention (mamba csrc/selective_scan): plain params structs with device pointers, sizes and
// strides in elements, no torch types; a launcher that takes the struct and a stream, checks
// what it can without touching the data, enqueues the kernel on `stream` and returns. All
// pointers are device pointers that stay valid until the work on `stream` is done; the
// caller owns every buffer. Activations (u, delta, z, B, C, out) are float32 or bfloat16
// (`dtype`); A, D, delta_bias and the state are float32, and so is all arithmetic.
// The torch-facing wrappers are in mamba_cuda_torch.h.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/cuda_check.h"

namespace attnserve::kernels::mamba {

// Prefill. Launch: grid (ceil(dim / 4), batch), 64 threads: each block scans 4 channels of one
// sequence, 16 lanes per channel, each lane holding dstate / 16 (rounded up) state entries in
// registers for the whole sequence. The sequence is processed in chunks of 16 steps: the
// block stages the chunk's inputs in shared memory (dt = softplus(delta + bias), dt·u, D·u,
// silu(z), B, C; the next chunk's global loads are in flight meanwhile), every lane advances
// its state entries 16 steps, a 16-lane butterfly reduces the 16 partial C·h sums (one
// shuffle per step instead of four), and the chunk's outputs leave through shared memory in
// coalesced rows. Nothing of size L × dstate is ever written to global memory.
// dstate <= 64.
struct SelectiveScanCudaParams {
  int64_t batch = 0, seqlen = 0, dim = 0, dstate = 0;
  cuda::DType dtype = cuda::DType::kFloat32;  // of u, delta, z, B, C, out

  const void* u = nullptr;  // (batch, seqlen, dim), last dimension contiguous
  int64_t u_batch_stride = 0, u_seq_stride = 0;
  const void* delta = nullptr;  // (batch, seqlen, dim), before bias and softplus
  int64_t delta_batch_stride = 0, delta_seq_stride = 0;
  const float* delta_bias = nullptr;  // (dim), or null
  bool delta_softplus = true;
  const void* z = nullptr;  // (batch, seqlen, dim), or null for no gate
  int64_t z_batch_stride = 0, z_seq_stride = 0;
  const void* B = nullptr;  // (batch, seqlen, dstate), last dimension contiguous
  int64_t b_batch_stride = 0, b_seq_stride = 0;
  const void* C = nullptr;  // (batch, seqlen, dstate)
  int64_t c_batch_stride = 0, c_seq_stride = 0;
  const float* A = nullptr;  // (dim, dstate) contiguous: A = -exp(A_log), as the weight is
  const float* D = nullptr;  // (dim), or null
  void* out = nullptr;       // (batch, seqlen, dim), last dimension contiguous
  int64_t out_batch_stride = 0, out_seq_stride = 0;
  // (batch, dim, dstate): each sequence's (dim, dstate) block contiguous, sequences
  // state_batch_stride apart. Read at the start and overwritten with the state after the last
  // step (in place). `out` must not overlap the inputs or the state.
  float* state = nullptr;
  int64_t state_batch_stride = 0;
};

cuda::CudaStatus LaunchSelectiveScan(const SelectiveScanCudaParams& params, cudaStream_t stream);

// Decode: one token for each of `batch` sessions, whose states need not be adjacent.
// Launch: grid (ceil(dim / 16), batch), 256 threads: 16 lanes per channel, a 4-step shuffle
// reduction over the lanes; memory-bound on reading and writing the states.
struct SelectiveStateUpdateCudaParams {
  int64_t batch = 0, dim = 0, dstate = 0;
  cuda::DType dtype = cuda::DType::kFloat32;  // of u, delta, z, B, C, out

  const void* u = nullptr;  // (batch, dim), rows u_batch_stride apart
  int64_t u_batch_stride = 0;
  const void* delta = nullptr;  // (batch, dim)
  int64_t delta_batch_stride = 0;
  const float* delta_bias = nullptr;  // (dim), or null
  bool delta_softplus = true;
  const void* z = nullptr;  // (batch, dim), or null
  int64_t z_batch_stride = 0;
  const void* B = nullptr;  // (batch, dstate)
  int64_t b_batch_stride = 0;
  const void* C = nullptr;  // (batch, dstate)
  int64_t c_batch_stride = 0;
  const float* A = nullptr;  // (dim, dstate) contiguous
  const float* D = nullptr;  // (dim), or null
  void* out = nullptr;       // (batch, dim)
  int64_t out_batch_stride = 0;

  // The states, updated in place, each (dim, dstate) contiguous, in one of two forms:
  //   state_ptrs != null: a device array of `batch` device pointers, one per session (states
  //     kept wherever the session table keeps them; no gather, no scatter);
  //   otherwise: one batched tensor, session b at state + b * state_batch_stride.
  float* const* state_ptrs = nullptr;
  float* state = nullptr;
  int64_t state_batch_stride = 0;
};

cuda::CudaStatus LaunchSelectiveStateUpdate(const SelectiveStateUpdateCudaParams& params,
                                            cudaStream_t stream);

}  // namespace attnserve::kernels::mamba

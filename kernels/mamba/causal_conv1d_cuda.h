// Mamba's depthwise causal conv1d (+ SiLU) on an NVIDIA GPU, continuing from a conv state,
// with the semantics of causal_conv1d_cpu.h:
//   out[t, c] = silu(bias[c] + Σ_k weight[c, k] · in(t - (width - 1) + k, c))
// where in(j) for j < 0 comes from the state. The state holds the last `width` inputs of each
// channel in time order (state[c, width - 1] is the newest), as Hugging Face's conv_state
// does, and is overwritten with the last `width` inputs after the chunk (taken from the old
// state too when the chunk is shorter than `width`).
//
// One kernel serves prefill (any seqlen) and decode (seqlen = 1 for a batch of sessions).
// Launch: grid (ceil(dim / 128), ceil(seqlen / 64), batch), 128 threads; a thread computes 64
// consecutive steps of one channel with a sliding window in registers (loads coalesced
// across channels). The thread of the first time tile reads the old state and writes the new
// one (the new state needs only the old state and the input), so no other block touches the
// state and it may be updated in place.
//
// Params-struct convention as selective_scan_cuda.h: device pointers, strides in elements, no
// torch types; the caller owns every buffer; work is enqueued on `stream`.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/cuda_check.h"

namespace attnserve::kernels::mamba {

struct CausalConv1dCudaParams {
  int64_t batch = 0, seqlen = 0, dim = 0, width = 0;  // 1 <= width <= 8
  cuda::DType dtype = cuda::DType::kFloat32;          // of in and out

  const void* in = nullptr;  // (batch, seqlen, dim), last dimension contiguous
  int64_t in_batch_stride = 0, in_seq_stride = 0;
  const float* weight = nullptr;  // (dim, width) contiguous: conv1d.weight (dim, 1, width)
  const float* bias = nullptr;    // (dim), or null
  bool silu = true;
  void* out = nullptr;  // (batch, seqlen, dim), last dimension contiguous; not overlapping in
  int64_t out_batch_stride = 0, out_seq_stride = 0;

  // The float32 states, each (dim, width) contiguous, read and updated in place, either
  //   state_ptrs != null: a device array of `batch` device pointers (one per session), or
  //   state + b * state_batch_stride for sequence b.
  float* const* state_ptrs = nullptr;
  float* state = nullptr;
  int64_t state_batch_stride = 0;
};

cuda::CudaStatus LaunchCausalConv1d(const CausalConv1dCudaParams& params, cudaStream_t stream);

}  // namespace attnserve::kernels::mamba

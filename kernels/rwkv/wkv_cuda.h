// RWKV-4's WKV recurrence on an NVIDIA GPU: the same stable form as wkv_cpu.h (running maximum
// p kept apart from the numerator a and denominator b), for a chunk of any length and for one
// token of many sessions (seqlen 1). Float32 only: the mixer's activations and its state.
//
// Convention (as selective_scan_cuda.h): a plain params struct with device pointers, sizes and
// strides in elements, no torch types; the launcher checks what it can without touching the
// data, enqueues on `stream` and returns. The torch-facing wrapper is rwkv_cuda_torch.h.
//
// Launch: grid (ceil(channels / 128), batch), 128 threads: one thread per (sequence, channel)
// holds a, b, p in registers for the whole chunk; consecutive threads read consecutive
// channels of each token (coalesced). The recurrence is sequential in time, so a chunk's
// parallelism is batch x channels.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/cuda_check.h"

namespace attnserve::kernels::rwkv {

struct WkvCudaParams {
  int64_t batch = 0, seqlen = 0, channels = 0;

  const float* k = nullptr;  // (batch, seqlen, channels), last dimension contiguous
  int64_t k_batch_stride = 0, k_seq_stride = 0;
  const float* v = nullptr;  // (batch, seqlen, channels), last dimension contiguous
  int64_t v_batch_stride = 0, v_seq_stride = 0;
  const float* w = nullptr;  // (channels): -exp(time_decay)
  const float* u = nullptr;  // (channels): time_first
  float* out = nullptr;      // (batch, seqlen, channels), contiguous
  // (batch, 3, channels): sequence b's a, b, p at state + b * state_batch_stride, each
  // (3, channels) block contiguous; read, then overwritten after the last step.
  float* state = nullptr;
  int64_t state_batch_stride = 0;
};

cuda::CudaStatus LaunchWkv(const WkvCudaParams& params, cudaStream_t stream);

}  // namespace attnserve::kernels::rwkv

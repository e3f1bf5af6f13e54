// Mamba's depthwise causal conv1d followed by SiLU (or not: LFM2's short convolution), continuing
// from a conv state.
//   out[t, c] = silu(bias[c] + Σ_k weight_t[k, c] · in(t - (width - 1) + k, c))
// where in(j) for j < 0 comes from the state. The state holds the last `width` inputs in time
// order (state[..., width - 1] is the newest), as Hugging Face's conv_state does; it is
// updated in place to the last `width` inputs after the chunk.
#pragma once

#include <cstdint>

namespace attnserve::kernels::mamba {

struct CausalConv1dParams {
  int64_t batch = 0, seqlen = 0, dim = 0, width = 0;
  const float* in = nullptr;  // (batch, seqlen, dim), strides below, last dim contiguous
  int64_t in_batch_stride = 0, in_seq_stride = 0;
  const float* weight_t = nullptr;  // (width, dim) contiguous: conv1d.weight (dim, 1, width)ᵀ
  const float* bias = nullptr;      // (dim), or null: none
  bool silu = true;                 // false: the sum as it is
  float* state = nullptr;           // (batch, dim, width) contiguous, read and updated
  // Or one state per batch row, each (dim, width) contiguous (separate sessions' states decoded
  // in one batch): when set, `state` is ignored.
  float* const* row_states = nullptr;
  float* out = nullptr;  // (batch, seqlen, dim) contiguous
};

// Parallel over (batch, blocks of time steps) with ATen's thread pool.
void CausalConv1dCpu(const CausalConv1dParams& params);

}  // namespace attnserve::kernels::mamba

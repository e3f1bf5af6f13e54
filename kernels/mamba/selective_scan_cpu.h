// The Mamba-1 selective scan on the CPU, fused: one pass over the sequence that discretises,
// updates the state, reads out, adds the D skip and applies the silu(z) gate, never holding
// more than one (d_inner-block, d_state) slice of the state. As in mamba's
// csrc/selective_scan: a plain params struct (sizes, pointers, strides in elements) and a
// launcher; the torch-facing checks are in mamba_mixer.cc.
//
// For every batch b, channel d, step t (h is the state, N = d_state):
//   dt    = softplus(delta[t,d] + delta_bias[d])   (without softplus when !delta_softplus)
//   dA    = exp(dt · A[n,d])
//   h[n]  = dA · h[n] + dt · B[t,n] · u[t,d]
//   out   = (Σ_n C[t,n] · h[n] + D[d] · u[t,d]) · silu(z[t,d])
#pragma once

#include <cstdint>

namespace attnserve::kernels::mamba {

struct SelectiveScanParams {
  int64_t batch = 0, seqlen = 0, dim = 0, dstate = 0;

  const float* u = nullptr;           // (batch, seqlen, dim), strides below
  const float* delta = nullptr;       // (batch, seqlen, dim), before bias and softplus
  const float* delta_bias = nullptr;  // (dim), or null for none
  bool delta_softplus = true;
  const float* z = nullptr;    // (batch, seqlen, dim)
  const float* B = nullptr;    // (batch, seqlen, dstate)
  const float* C = nullptr;    // (batch, seqlen, dstate)
  const float* A_t = nullptr;  // (dstate, dim) contiguous: A = -exp(A_log), transposed
  // (dim, dstate) contiguous: A itself, for the decode-step path (seqlen 1, dstate a multiple of
  // 16), which keeps each channel's state row in place; null: the step runs as a sequence.
  const float* A = nullptr;
  const float* D = nullptr;  // (dim)
  float* out = nullptr;      // (batch, seqlen, dim), contiguous
  float* state = nullptr;    // (batch, dim, dstate) contiguous, read and updated in place
  // Or one state per batch row, each (dim, dstate) contiguous, wherever it lives (the states of
  // separate sessions decoded in one batch, as mamba's selective_state_update takes state
  // indices): when set, `state` is ignored.
  float* const* row_states = nullptr;

  // Strides in elements along batch and sequence; the last dimension is contiguous.
  int64_t u_batch_stride = 0, u_seq_stride = 0;
  int64_t delta_batch_stride = 0, delta_seq_stride = 0;
  int64_t z_batch_stride = 0, z_seq_stride = 0;
  int64_t bc_batch_stride = 0, bc_seq_stride = 0;  // shared by B and C (slices of x_proj)
};

// Parallel over (batch, blocks of 16 channels) with ATen's thread pool. A decode step (seqlen 1)
// with `A` set sums each channel's read-out in a different order than a sequence does: equal
// to float32 rounding, not bit for bit.
void SelectiveScanCpu(const SelectiveScanParams& params);

}  // namespace attnserve::kernels::mamba

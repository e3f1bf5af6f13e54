// The Mamba-2 state-space scan (SSD, "state space duality", Dao & Gu 2024) on the CPU, from
// the scan's inputs to y + D·x (the gated norm and out_proj are the mixer's). As mamba_ssm's
// kernels: a plain params struct (sizes, pointers, strides in elements) and a launcher; the
// torch-facing checks are in mamba2_mixer.cc.
//
// For every batch row b, head h (group g = h / (heads / groups)), step t, with the state
// S[h] of (head_dim, dstate) (P = head_dim, N = dstate):
//   dt    = clamp(softplus(dt_raw[t,h] + dt_bias[h]), dt_min, dt_max)
//   S[h]  = exp(dt · A[h]) · S[h] + dt · x[t,h,:] ⊗ B[t,g,:]
//   y     = S[h] · C[t,g,:] + D[h] · x[t,h,:]
//
// Two algorithms with the same result (to float32 rounding):
//   * a sequence (seqlen > 1) runs chunk by chunk (`chunk` tokens; the last may be shorter),
//     with the state carried between chunks, and a chunk's work done as matrix products
//     (quadratic within a chunk): with a[t] the cumulative sum of dt·A over the chunk,
//       M[t,s]   = (C[t]·B[s]) · exp(a[t] - a[s]) · dt[s]        (s <= t)
//       y[t]     = Σ_s M[t,s] x[s]  +  exp(a[t]) · S_in · C[t]  +  D x[t]
//       S_out    = exp(a[q-1]) S_in  +  Σ_s exp(a[q-1] - a[s]) dt[s] x[s] ⊗ B[s]
//     C·Bᵀ of a chunk is computed once for all the heads of a group that a task holds.
//   * a decode step (seqlen 1) updates each head's state in place (the recurrence above).
// Each head's result is independent of the batch: row b alone gives the same bits as row b
// among others (StepBatch relies on it).
#pragma once

#include <cstdint>
#include <limits>

namespace attnserve::kernels::mamba2 {

// The longest chunk the CPU scan takes, whatever the model's chunk_size (the result is the same
// but for rounding): the fastest here (ssd_scan_cpu.cc has the measurements).
constexpr int64_t kSsdMaxCpuChunk = 64;

struct SsdScanParams {
  int64_t batch = 0, seqlen = 0, heads = 0, head_dim = 0, groups = 0, dstate = 0;
  // Tokens a chunk of a sequence (>= 1): the model's chunk_size, an upper bound (the kernel
  // takes at most kSsdMaxCpuChunk).
  int64_t chunk = 256;

  const float* x = nullptr;  // (batch, seqlen, heads · head_dim), strides below
  int64_t x_batch_stride = 0, x_seq_stride = 0;
  const float* B = nullptr;                        // (batch, seqlen, groups · dstate)
  const float* C = nullptr;                        // (batch, seqlen, groups · dstate)
  int64_t bc_batch_stride = 0, bc_seq_stride = 0;  // shared by B and C (slices of one row)
  const float* dt = nullptr;  // (batch, seqlen, heads), before bias, softplus and clamp
  int64_t dt_batch_stride = 0, dt_seq_stride = 0;
  const float* dt_bias = nullptr;  // (heads)
  float dt_min = 0.0f, dt_max = std::numeric_limits<float>::infinity();
  const float* A = nullptr;  // (heads): -exp(A_log)
  const float* D = nullptr;  // (heads)
  float* out = nullptr;      // (batch, seqlen, heads · head_dim) contiguous: y + D·x
  // (batch, heads, head_dim, dstate) contiguous, read and updated in place (Hugging Face's
  // Mamba2Cache.ssm_states layout); or one state per batch row, each (heads, head_dim, dstate)
  // contiguous, wherever it lives (separate sessions decoded in one batch): when set, `state`
  // is ignored.
  float* state = nullptr;
  float* const* row_states = nullptr;
};

// Parallel with ATen's thread pool: a sequence over (batch, group, blocks of heads), a step over
// (batch, head).
void SsdScanCpu(const SsdScanParams& params);

// softplus as torch computes it (threshold 20: x itself above), then clamped to [lo, hi].
float SoftplusClamped(float x, float lo, float hi);

}  // namespace attnserve::kernels::mamba2

// RWKV-4's WKV recurrence on the CPU, in the numerically stable form (the running maximum `p`
// is kept apart from the numerator `a` and denominator `b`, as BlinkDL's kernels and Hugging
// Face's rwkv_linear_attention_cpu do, so that e^k never overflows however large k grows).
// As in mamba's csrc: a plain params struct (sizes, pointers, strides in elements) and a
// launcher; the torch-facing checks are in rwkv_block.cc.
//
// For every batch b, channel c, step t, with w = -exp(time_decay[c]) (< 0) and u = time_first[c],
// the true state is A = a·e^p, B = b·e^p (A = Σ_{i<t} e^{(t-1-i)w + k_i} v_i, B likewise without
// v_i) and
//   q      = max(p, u + k_t)
//   out_t  = (e^{p-q} a + e^{u+k_t-q} v_t) / (e^{p-q} b + e^{u+k_t-q})
//   q'     = max(p + w, k_t)
//   a      = e^{p+w-q'} a + e^{k_t-q'} v_t,   b = e^{p+w-q'} b + e^{k_t-q'},   p = q'
// A fresh state is a = b = 0, p = -1e38 (Hugging Face's).
#pragma once

#include <cstdint>

namespace attnserve::kernels::rwkv {

struct WkvParams {
  int64_t batch = 0, seqlen = 0, channels = 0;

  const float* k = nullptr;  // (batch, seqlen, channels), strides below
  const float* v = nullptr;  // (batch, seqlen, channels), strides below
  const float* w = nullptr;  // (channels): -exp(time_decay), already negated
  const float* u = nullptr;  // (channels): time_first
  float* out = nullptr;      // (batch, seqlen, channels), contiguous
  // (batch, 3, channels) contiguous: a, b, p of each row, read and updated in place.
  float* state = nullptr;
  // Or one state per batch row, each (3, channels) contiguous, wherever it lives (the states of
  // separate sessions decoded in one batch): when set, `state` is ignored.
  float* const* row_states = nullptr;

  // Strides in elements along batch and sequence; the last dimension is contiguous.
  int64_t k_batch_stride = 0, k_seq_stride = 0;
  int64_t v_batch_stride = 0, v_seq_stride = 0;
};

// Parallel over (batch, blocks of 16 channels) with ATen's thread pool.
void WkvCpu(const WkvParams& params);

}  // namespace attnserve::kernels::rwkv

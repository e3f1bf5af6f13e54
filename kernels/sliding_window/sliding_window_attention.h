// The `sliding_window` mixer: causal multi-head softmax attention over the last W tokens
// (W = MixerConfig::window), y_t = o_proj(softmax(q_t K[t-W+1..t]ᵀ / √d) V[t-W+1..t]), with the
// standard mixer's projections (q_proj, k_proj, v_proj, o_proj, each (d_model, d_model)) and
// its tiled kernel (flash_attention_cpu.h with a window: O(L·W) work, O(L·d) memory).
//
// Attention sinks (MixerConfig::sinks = S, optional; StreamingLLM's): the first S tokens are
// attended by every later query as well, whatever the window.
//
// Streaming state: the S sinks' keys and values and a ring of the last W, fixed size whatever
// the length. MixerState.tensors = {k_slots, v_slots}, each (B, H, S + W, d) float32; position
// t < S lives at slot t, a later one at slot S + (t - S) mod W, so the valid slots are
// 0 .. min(t, S) + min(max(t - S, 0), W) - 1. StateBytesPerSequence is 2·H·(S + W)·d·4 bytes
// for every position: O(1) memory per session.
// With W at least the sequence length the outputs equal the standard mixer's bit for bit
// (same kernels, same order of keys).
// On CUDA: the standard mixer's kernels (flash_attention_cuda.h), the prefill one with its
// window and sinks, the split-K decode one over each ring's valid slots (per-session lengths,
// so StepBatch decodes sessions at different positions in one launch, in place). There the
// split-K decode divides the keys by the batch's longest ring, so a session's decode step may
// differ in its last bits with the batch it shares (on the CPU it does not).
#pragma once

#include "kernels/common/mixer.h"
#include "kernels/common/mixer_registry.h"

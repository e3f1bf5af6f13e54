// The `sliding_window` mixer: causal multi-head softmax attention over the last W tokens
// (W = MixerConfig::window), y_t = o_proj(softmax(q_t K[t-W+1..t]ᵀ / √d) V[t-W+1..t]), with the
// standard mixer's projections (q_proj, k_proj, v_proj, o_proj, each (d_model, d_model)) and
// its tiled kernel (flash_attention_cpu.h with a window: O(L·W) work, O(L·d) memory).
//
// Streaming state: a ring of the last W keys and values, fixed size whatever the length.
//   MixerState.tensors = {k_ring, v_ring}, each (B, H, W, d) float32; the key of absolute
//   position t lives at slot t mod W, so slots 0 .. min(position, W) - 1 are valid.
//   StateBytesPerSequence is 2·H·W·d·4 bytes for every position: O(1) memory per session.
// With W at least the sequence length the outputs equal the standard mixer's bit for bit
// (same kernels, same order of keys); a CUDA kernel does not exist yet: CUDA tensors are
// refused with FailedPrecondition.
#pragma once

#include "kernels/common/mixer.h"
#include "kernels/common/mixer_registry.h"

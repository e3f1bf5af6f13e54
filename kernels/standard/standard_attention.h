// The `standard` mixer: multi-head softmax attention, y = o_proj(softmax(QKᵀ/√d + mask) V),
// computed with the tiled kernels of flash_attention.h (memory O(L·d), never O(L²)), as trained
// transformers have it: grouped key/value heads (GQA, MQA), a head width of its own, q/k/v and
// o biases, rotary positions of every transformers scaling type (kernels/common/
// rotary_positions.h) and a window of the latest positions (Mistral's sliding window: the KV
// cache keeps every position, each query reads its window's).
//
// Weights: q_proj.weight (H·d, D), k_proj.weight, v_proj.weight (Hkv·d, D), o_proj.weight
// (D, H·d), and the biases the config names (attention_projections.h).
//
// config.causal = true: causal, streams with a KV cache.
//   MixerState.tensors = {k_cache, v_cache}, each (B, Hkv, capacity, d) float32, of which the
//   first `position` entries along dim 2 are valid (capacity >= position). The capacity grows
//   by doubling so that a Step copies O(1) tokens amortised; MixerState::Bytes() therefore
//   counts the capacity, while StateBytesPerSequence(position) is the valid part,
//   2·Hkv·position·d·4 bytes. Prefill and Step write the new tokens into the caches in place
//   (beyond `position`, so a shallow copy of an earlier state still reads its own prefix) or
//   replace them by larger ones; branching one state into two streams needs Clone().
// config.causal = false: bidirectional (encoder use); only Prefill with a null state works,
//   InitialState, Step and Prefill with a state return FailedPrecondition.
//
// The factory functions (ExpectedStandardWeights, RandomStandardWeights,
// CreateStandardMixer) are declared in kernels/common/mixer_registry.h; callers use
// CreateMixer in mixer.h.
#pragma once

#include <memory>

#include "kernels/common/attention_projections.h"
#include "kernels/common/mixer.h"
#include "kernels/common/mixer_registry.h"

namespace attnserve::kernels {

// A standard mixer over projections already made (AttentionProjections::FromConfig with a
// valid `config`), sharing their matrices with every other holder of a copy: the shared
// blocks' attention of each hybrid layer, each with its own adapter (server/model/
// shared_block.h).
std::unique_ptr<Mixer> CreateStandardMixerOver(const MixerConfig& config,
                                               AttentionProjections projections);

}  // namespace attnserve::kernels

// The `linformer` mixer (Wang et al., 2020): keys and values are projected along the sequence
// to a fixed length k before softmax attention, so time and memory are O(L·k):
//   y = o_proj( softmax( Q (E[:L]ᵀ K)ᵀ / √d ) (F[:L]ᵀ V) ), per head,
// where E, F (max_len, k) are shared by the heads and sliced to the first L rows for an input
// of L tokens.
//
// Weights: q_proj.weight, k_proj.weight, v_proj.weight, o_proj.weight (d_model, d_model)
// (attention_projections.h), and "E", "F" (max_len, linformer_k).
//
// Not causal (every output mixes all positions through E and F), so it never streams:
// InitialState, Step and Prefill with a non-null state return FailedPrecondition, and
// StateBytesPerSequence is 0. An input longer than max_len is InvalidArgument, unless
// config.linformer_interpolate: then E and F are interpolated to its length L
// (InterpolateLinformerProjection), as the seeds suggest for inputs past the trained length.
//
// E and F project positions, summing over them: a projection stretched from max_len to L
// rows is multiplied by max_len / L, so that a stretch of the input keeps the projected
// keys' and values' scale (and the softmax's temperature).
//
// The factory functions are declared in kernels/common/mixer_registry.h; callers use
// CreateMixer in mixer.h.
#pragma once

#include "kernels/common/mixer.h"
#include "kernels/common/mixer_registry.h"

namespace attnserve::kernels {

// Names of the sequence projections in the WeightMap.
inline constexpr char kLinformerE[] = "E";
inline constexpr char kLinformerF[] = "F";

// `projection` (rows, k) linearly interpolated along its rows to (length, k), half-pixel
// centres (row i samples position (i + 0.5) * rows / length - 0.5, clamped to the ends, as
// torch's interpolate(mode="linear", align_corners=False)), times rows / length.
at::Tensor InterpolateLinformerProjection(const at::Tensor& projection, int64_t length);

}  // namespace attnserve::kernels

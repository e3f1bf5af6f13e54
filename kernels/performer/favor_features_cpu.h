// FAVOR+ features (performer_attention.h) of decode rows on the CPU, each row of d floats
// computed on its own in one fixed order, so that a row's features are the same bits whatever
// the other rows, the batch size or the threads (ATen's matmul blocks its work by the number
// of rows, and its sums then round differently):
//   keys:     φ(k)_i = exp(ω_i·k̂ − |k̂|²/2) / √m        (FavorPlusFeatures)
//   queries:  φ̃(q)_i = exp(ω_i·q̂ − max_j ω_j·q̂)        (FavorPlusQueryFeatures)
// with x̂ = x / d^{1/4}, ω (m × d). Float32.
#pragma once

#include <cstdint>

namespace attnserve::kernels {

// x (rows, d) and omega (m, d) contiguous; out (rows, m). query: φ̃ (else φ).
void FavorPlusRowFeaturesCpu(const float* x, int64_t rows, int64_t d, const float* omega, int64_t m,
                             bool query, float* out);

}  // namespace attnserve::kernels

// One causal linear-attention step (causal_linear_attention_cpu.h's formulas, φ = elu + 1) for
// B sequences in one call, each sequence's state updated in place where its own state keeps it:
//   S += φ(k) vᵀ,  z += φ(k),  out = φ(q)ᵀ S / (φ(q)ᵀ z + ε)   (the token enters before the read);
// with map_features = false, q and k are features already (the performer's FAVOR+ φ) and the
// normaliser is max(φ(q)ᵀ z, FLT_MIN) (kPositiveNormaliserFloor) rather than + ε.
// Float32 on the CPU; parallel over (row, head). A (row, head) is computed the same way whatever
// the other rows (bit for bit).
#pragma once

#include <cstdint>

namespace attnserve::kernels {

struct LinearDecodeRow {
  float* s = nullptr;  // (H, d, d) contiguous, S[h][i][j] = Σ φ(k)_i v_j
  float* z = nullptr;  // (H, d) contiguous
};

// q, k, v (B, H, d) contiguous; rows[B]; out (B, H, d) contiguous.
void LinearAttentionDecodeCpu(const float* q, const float* k, const float* v,
                              const LinearDecodeRow* rows, int64_t batch, int64_t heads,
                              int64_t head_dim, float* out, bool map_features = true);

}  // namespace attnserve::kernels

// Rotary position embeddings (RoPE) as transformers v4.47.1 computes them
// (src/transformers/modeling_rope_utils.py and LlamaRotaryEmbedding in
// models/llama/modeling_llama.py, commit 241c04d36867259cdf11dbb4e9d9a60f9cb65ebc), for queries
// and keys before attention:
//   for the first `rotary_dim` dims of a head (the rest pass through), i < rotary_dim / 2,
//     angle_i(p) = float32(inv_freq_i · p)      (float32, as transformers' matmul computes it)
//     c = cos(angle) · attention_factor, s = sin(angle) · attention_factor
//     x'[i]        = x[i] · c - x[i + half] · s
//     x'[i + half] = x[i + half] · c + x[i] · s           (half = rotary_dim / 2: "rotate_half")
// inv_freq_i = 1 / theta^(2i / rotary_dim), changed by the scaling type:
//   "default"  none;  "linear"  / factor;
//   "dynamic"  theta' = theta · (factor · n / max_pos - (factor - 1))^(dim / (dim - 2)) where n
//              exceeds max_pos (NTK); n = the token's position + 1 (below);
//   "yarn"     a ramp between interpolated (/ factor) and extrapolated frequencies over the
//              dims of beta_fast..beta_slow rotations within max_pos; attention_factor
//              0.1 ln(factor) + 1 unless given;
//   "longrope" / long_factor_i (or short_factor_i where the expanded length does not exceed
//              the original), attention_factor sqrt(1 + ln(factor) / ln(original)) unless given;
//   "llama3"   low frequencies / factor, high ones kept, a smooth blend in between.
// Keys are stored rotated in the KV cache: a cached key never changes, so positions carry with
// the state (appends, resumes, snapshots, forks, prefix-cache hits all start at the state's
// position). "dynamic": transformers rotates every token of a forward call with the
// frequencies of the call's length n (its last position + 1), so its whole prompt, its chunks
// and its steps differ past max_position_embeddings; attnserve rotates each token with those of
// its own position (n = position + 1): transformers' token-by-token (generate step) path, the
// same in any chunking, and for a sequence within max_position_embeddings the plain frequencies
// (docs/models.md).
//
// Thread-safe and immutable after construction.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace attnserve::kernels {

// The config fields, with Hugging Face's names (config.json's rope_theta, partial_rotary_factor
// as rotary_dim, max_position_embeddings, and rope_scaling's keys).
struct RotaryConfig {
  // "" (no positions: NoPE), "default", "linear", "dynamic", "yarn", "longrope", "llama3".
  std::string type;
  double theta = 10000.0;
  int64_t rotary_dim = 0;  // even, <= head_dim; 0: head_dim
  int64_t max_position_embeddings = 0;
  double factor = 1.0;
  // llama3: rope_scaling's; longrope: the config's own (0: none).
  int64_t original_max_position_embeddings = 0;
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  double beta_fast = 32.0, beta_slow = 1.0;              // yarn
  double attention_factor = 0.0;                         // yarn, longrope; 0: the type's default
  std::vector<double> short_factor, long_factor;         // longrope, rotary_dim / 2 each

  bool enabled() const { return !type.empty(); }
};

// Checks the type and the fields it reads; the message names the field.
absl::Status ValidateRotaryConfig(const RotaryConfig& config, int64_t head_dim);

class RotaryPositions {
 public:
  RotaryPositions() = default;  // disabled: Apply does nothing
  RotaryPositions(const RotaryConfig& config, int64_t head_dim);

  bool enabled() const { return config_.enabled(); }
  int64_t rotary_dim() const { return rotary_dim_; }

  // Rotates q (B, H, L, d) and k (B, Hkv, L, d), float32, contiguous, in place, with one table of
  // cosines and sines: row b's token l at position starts[b] + l (starts.size() == B, or 1 for
  // every row). On the CPU a loop over the rows; elsewhere ATen operations on the device.
  void Apply(at::Tensor& q, at::Tensor& k, const std::vector<int64_t>& starts) const;

  // inv_freq (rotary_dim / 2 values) and the attention factor for a sequence of `length` tokens
  // (only "dynamic" depends on it).
  std::vector<float> InverseFrequencies(int64_t length, float* attention_factor) const;

 private:
  RotaryConfig config_;
  int64_t head_dim_ = 0, rotary_dim_ = 0;
  std::vector<float> inv_freq_;  // at max_position_embeddings and below
  float attention_factor_ = 1.0f;
};

}  // namespace attnserve::kernels

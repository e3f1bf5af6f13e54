// What ZambaForCausalLM (zamba.cc) and Zamba2ForCausalLM (zamba2.cc) read alike: the shared
// attention + MLP block's fields and layers_block_type.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "attnserve/v1/model_config.pb.h"

namespace attnserve::model::architectures {

// The keys both configs share, as each reader took them with its own defaults.
struct ZambaCommonKeys {
  int64_t vocab = 0, hidden = 0, mlp = 0, heads = 0, kv_heads = 0, head_dim = 0;
  std::string hidden_act;
  double rms_norm_eps = 0;
  int64_t max_positions = 0;
  bool tie_word_embeddings = true;
};

// Sets them, with the blocks' attention scale (head_dim / 2)^-1/2 (ZambaAttention's and
// Zamba2Attention's scaling).
void SetZambaCommonKeys(const ZambaCommonKeys& keys, v1::ModelConfig* config);

// layers_block_type (one entry per layer: "mamba" or "hybrid"; anything else refused by name)
// as layers of `mixer` and shared_block_layers marking the hybrid ones.
absl::Status SetZambaLayers(const std::vector<std::string>& types, const char* mixer,
                            v1::ModelConfig* config);

}  // namespace attnserve::model::architectures

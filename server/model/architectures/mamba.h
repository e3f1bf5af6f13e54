// The Mamba-1 family's shared keys and names (mamba.cc), which Falcon-Mamba (falcon_mamba.cc)
// extends.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "attnserve/v1/model_config.pb.h"
#include "server/model/architectures/architecture.h"

namespace attnserve::model::architectures {

// MambaConfig's keys (hidden_size, num_hidden_layers, state_size, conv_kernel, expand,
// time_step_rank, vocab_size, layer_norm_epsilon, tie_word_embeddings, use_bias,
// use_conv_bias): every layer "mamba", no MLP, RMSNorms.
absl::StatusOr<v1::ModelConfig> ReadMambaConfig(const ConfigJson& json);

// The hybrids' Mamba-1 keys, prefixed (Jamba's and Zamba's JambaConfig / ZambaConfig):
// mamba_d_state (16), mamba_d_conv (4), mamba_expand (2), mamba_dt_rank ("auto") into
// state_size, conv_kernel, expand, time_step_rank; mamba_proj_bias true and mamba_conv_bias false
// refused by name.
absl::Status ReadPrefixedMambaKeys(const ConfigJson& json, v1::ModelConfig* config);

// time_step_limit ([min, max] or absent: none; Mamba2Config's, Zamba2Config's) into
// config.time_step_limit.
absl::Status ReadTimeStepLimit(const ConfigJson& json, v1::ModelConfig* config);

// The Mamba-2 hybrids' mamba_n_* keys (GraniteMoeHybridConfig's and BambaConfig's):
// mamba_n_heads, mamba_d_head ("auto": mamba_expand · hidden / mamba_n_heads), mamba_n_groups,
// mamba_d_state, mamba_d_conv, mamba_expand, mamba_chunk_size, time_step_limit, into the mamba2
// layers' fields (config.hidden_size already set). Refused by name: mamba_n_groups > 1 (their
// gated norm spans all of d_inner, attnserve's a group at a time: the same for one group, as
// every released model has), mamba_d_head · mamba_n_heads other than mamba_expand · hidden_size,
// mamba_conv_bias false, mamba_proj_bias.
// With falcon_h1 (FalconH1Config's): mamba_d_ssm is the width (absent: 1024, null: mamba_expand ·
// hidden_size; config.ssm_inner_size where they differ), mamba_d_head · mamba_n_heads must be it,
// groups are allowed (FalconH1RMSNormGated normalises each group apart, as attnserve does), and
// time_step_limit is not read (FalconH1Mixer fixes it at (0, inf)).
absl::Status ReadMambaNKeys(const ConfigJson& json, v1::ModelConfig* config,
                            bool falcon_h1 = false);

// Model's names, but for mamba_ssm's backbone.embedding.weight (backbone.embeddings.weight).
std::string MambaModelName(const std::string& stored);

}  // namespace attnserve::model::architectures

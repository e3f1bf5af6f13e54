#include "server/model/model_fingerprint.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "server/model/shared_block.h"

namespace attnserve::model {

using kernels::WeightSpec;

uint64_t Fnv(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// The fields of a config that change what the model computes: a state stays valid across a
// rewrite of config.json (ours to Hugging Face's, a new max_sequence_length, defaults of
// mixers the model does not use).
v1::ModelConfig ArchitectureOf(const v1::ModelConfig& config) {
  v1::ModelConfig a = config;
  a.clear_model_type();
  a.clear_max_sequence_length();
  if (a.norm() == "rms_norm") a.clear_norm();  // the default, spelt out
  bool attention = false, linformer = false, mamba = false, mamba2 = false, rwkv = false,
       short_conv = false, window = false, performer = false, sparse = false, only_rwkv = true;
  std::vector<std::string> kinds(a.layers().begin(), a.layers().end());
  for (const std::string& beside : a.parallel_layers()) {
    if (!beside.empty()) kinds.push_back(beside);
  }
  for (const std::string& layer : kinds) {
    attention = attention ||
                (layer != "mamba" && layer != "rwkv" && layer != "mamba2" && layer != "none" &&
                 layer != "short_conv") ||
                UsesSharedBlock(a);
    linformer = linformer || layer == "linformer";
    mamba = mamba || layer == "mamba";
    mamba2 = mamba2 || layer == "mamba2";
    short_conv = short_conv || layer == "short_conv";
    rwkv = rwkv || layer == "rwkv";
    window = window || layer == "sliding_window";
    sparse = sparse || layer == "sparse";
    performer = performer || layer == "performer";
    only_rwkv = only_rwkv && layer == "rwkv";
  }
  if (!window) {
    a.clear_sliding_window();
    a.clear_sliding_window_sinks();
  }
  if (!performer) a.clear_performer_seed();
  if (!sparse) {
    a.clear_sparse_pattern();
    a.clear_sparse_stride();
  }
  if (a.sparse_pattern() != "fixed") a.clear_sparse_c();  // only fixed reads it
  if (a.final_norm_epsilon() == a.norm_epsilon()) a.clear_final_norm_epsilon();  // spelt out
  // Rescaling with no halving before ln_out and every block at scale 1 is none.
  if (a.rwkv_rescale_every() > a.layers_size()) a.clear_rwkv_rescale_every();
  // In rwkv layers intermediate_size 0 means 4 * hidden_size (the channel mixing's width);
  // with no other layer to read it as "no MLP", the two spellings are one model.
  if (only_rwkv && a.intermediate_size() == 0) a.set_intermediate_size(4 * a.hidden_size());
  if (!rwkv) {
    a.clear_rwkv_attention_size();
  } else if (a.rwkv_attention_size() == 0) {
    a.set_rwkv_attention_size(a.hidden_size());
  }
  if (a.hidden_act() == "silu") a.clear_hidden_act();  // the default, spelt out
  if (a.num_key_value_heads() == a.num_heads()) a.clear_num_key_value_heads();
  if (a.num_heads() > 0 && a.head_dim() * a.num_heads() == a.hidden_size()) a.clear_head_dim();
  bool windows = false;
  for (int64_t w : a.attention_windows()) windows = windows || w != 0;
  if (!windows) a.clear_attention_windows();
  if (!UsesSharedBlock(a)) a.clear_shared_block_layers();
  if (std::all_of(a.mlp_layers().begin(), a.mlp_layers().end(), [](bool b) { return b; })) {
    a.clear_mlp_layers();  // every layer: the default, spelt out
  }
  if (std::all_of(a.parallel_layers().begin(), a.parallel_layers().end(),
                  [](const std::string& k) { return k.empty(); })) {
    a.clear_parallel_layers();
  }
  if (!attention) {
    a.clear_attention_scale();
    a.clear_num_heads();
    a.clear_bidirectional();
    a.clear_num_key_value_heads();
    a.clear_head_dim();
    a.clear_attention_qkv_bias();
    a.clear_attention_qk_norm();
    a.clear_attention_out_bias();
    a.clear_rope_theta();
    a.clear_partial_rotary_factor();
    a.clear_rope_scaling();
    a.clear_attention_windows();
  }
  if (!(a.rope_theta() > 0)) {
    a.clear_partial_rotary_factor();
    a.clear_rope_scaling();
    a.clear_max_position_embeddings();
    a.clear_original_max_position_embeddings();
  }
  if (a.intermediate_size() == 0) {
    a.clear_hidden_act();
    a.clear_mlp_bias();
  }
  if (!linformer) {
    a.clear_linformer_k();
    a.clear_linformer_max_len();
    a.clear_linformer_extend();
  }
  if (!mamba && !mamba2) {
    a.clear_state_size();
    a.clear_expand();
  }
  if (!mamba && !mamba2 && !short_conv) a.clear_conv_kernel();
  if (!short_conv) a.clear_short_conv_bias();
  if (a.num_experts() == 0) {
    a.clear_num_experts_per_tok();
    a.clear_moe_router();
    a.clear_expert_layers();
  } else {
    if (a.moe_router() == "softmax_topk") a.clear_moe_router();  // the default, spelt out
    bool all = true;
    for (bool e : a.expert_layers()) all = all && e;
    if (all) a.clear_expert_layers();
  }
  if (!mamba || a.mamba_bcdt_rms_eps() == 0) a.clear_mamba_bcdt_norm_weights();
  if (!mamba || a.mamba_num_heads() <= 1) a.clear_mamba_num_heads();
  if (!mamba) {
    a.clear_time_step_rank();
    a.clear_mamba_bcdt_rms_eps();
  } else if (a.time_step_rank() == 0) {
    a.set_time_step_rank((a.hidden_size() + 15) / 16);
  }
  a.clear_ssm_chunk_size();  // how a prefill is scanned, not what it computes
  if (!mamba2) {
    a.clear_ssm_num_heads();
    a.clear_ssm_n_groups();
    a.clear_time_step_limit();
  } else if (a.time_step_limit_size() == 2 && a.time_step_limit(0) == 0 &&
             std::isinf(a.time_step_limit(1))) {
    a.clear_time_step_limit();  // the default, spelt out
  }
  return a;
}

// Config architecture and a strided sample of every weight, FNV-1a hashed.
uint64_t Fingerprint(const v1::ModelConfig& config, const std::vector<WeightSpec>& specs,
                     const std::map<std::string, at::Tensor>& weights) {
  std::string config_bytes;
  ArchitectureOf(config).SerializeToString(&config_bytes);
  uint64_t h = Fnv(1469598103934665603ull, config_bytes.data(), config_bytes.size());
  for (const WeightSpec& spec : specs) {
    const at::Tensor& t = weights.at(spec.name);
    h = Fnv(h, spec.name.data(), spec.name.size());
    // A strided sample of each tensor: cheap for large checkpoints, and any retraining or
    // reinitialisation changes it.
    const at::Tensor flat = t.contiguous().view(-1);
    const int64_t step = std::max<int64_t>(1, flat.numel() / 1024);
    const float* data = flat.data_ptr<float>();
    for (int64_t j = 0; j < flat.numel(); j += step) h = Fnv(h, data + j, sizeof(float));
  }
  return h;
}

}  // namespace attnserve::model

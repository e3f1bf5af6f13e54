// The Hugging Face architectures attnserve loads unchanged, one file each (as llama.cpp's
// src/models/<arch>.cpp and vLLM's model registry): what its config.json's keys mean in
// attnserve's ModelConfig (proto/attnserve/v1/model_config.proto), and what its tensors are
// called in Model's names (server/model/model.h). The wiring itself is the generic model's
// (embedding -> N x (norm -> mixer -> residual [-> norm -> MLP -> residual]) -> norm -> lm_head),
// with the mixers of kernels/. Each file names the upstream modeling file and commit it follows.
//
// Registry (registry.cc), by config.json's model_type:
//   mamba   MambaForCausalLM      mamba.cc     (mamba.h: the family's shared keys)
//   falcon_mamba FalconMambaForCausalLM falcon_mamba.cc
//   mamba2  Mamba2ForCausalLM     mamba2.cc
//   (none, d_model) mamba_ssm's MambaLMHeadModel  mamba_ssm.cc (model_type "mamba_ssm" here)
//   rwkv    RwkvForCausalLM       rwkv.cc
//   llama   LlamaForCausalLM      llama.cc     (decoder_only.h: the Llama family's shared keys)
//   mistral MistralForCausalLM    mistral.cc
//   qwen2   Qwen2ForCausalLM      qwen2.cc
//   jamba   JambaForCausalLM      jamba.cc     (Mamba-1 + GQA attention + mixture of experts)
//   zamba   ZambaForCausalLM      zamba.cc     (multi-head Mamba-1 + a shared attention block)
//   zamba2  Zamba2ForCausalLM     zamba2.cc    (Mamba-2 + shared attention blocks with adapters)
//   granitemoehybrid GraniteMoeHybridForCausalLM granite_moe_hybrid.cc (Mamba-2 + attention +
//           a shared MLP and experts; Granite-4.0-H)
//   bamba   BambaForCausalLM      bamba.cc     (Mamba-2 + attention with partial rotary positions)
//   nemotron_h NemotronHForCausalLM nemotron_h.cc (Mamba-2, attention, relu² MLP or experts: one
//           part per block)
//   falcon_h1 FalconH1ForCausalLM falcon_h1.cc (attention beside Mamba-2 in every layer, µP
//           multipliers folded into the weights)
//   lfm2    Lfm2ForCausalLM       lfm2.cc      (gated short convolutions + GQA attention with
//           q/k norms)
// A config.json of any other model_type is attnserve's own schema.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "attnserve/v1/model_config.pb.h"
#include "server/model/architectures/config_fields.h"

namespace attnserve::model::architectures {

// A stored tensor's share of one of Model's tensors: its entry `index` along dim 0 (index >= 0:
// one expert of a stacked (E, ...) tensor) or all of it, then all of that (length < 0) or rows
// [start, start + length) along `dim` (a fused gate_up_proj's gate and up halves).
struct TensorPart {
  std::string name;  // Model's; "" for a tensor the model does not use
  int64_t dim = 0, start = 0, length = -1;
  int64_t index = -1;
};

struct Architecture {
  const char* model_type;  // config.json's
  const char* hf_class;    // its "architectures" entry
  // config.json -> ModelConfig (defaults are filled in and the result validated afterwards).
  // A key or value the loader does not support is an error naming the key and its value.
  absl::StatusOr<v1::ModelConfig> (*read_config)(const ConfigJson& json);
  // A stored tensor's name as Model knows it; "" for a tensor the model does not use (a
  // rotary inv_freq buffer some exports keep).
  std::string (*model_name)(const std::string& stored);
  // The inverse, for writing a folder in this layout (WriteModelFolder); null where attnserve
  // writes its own layout instead.
  std::string (*stored_name)(const std::string& model_name);
  // Where model_name cannot say it alone (null otherwise, and then used instead of it): a stored
  // tensor's parts as Model's tensors, given the config (Zamba2's shared blocks, whose names
  // depend on which hybrid layer holds them, and whose fused gate_up_proj is split in two).
  std::vector<TensorPart> (*model_tensors)(const std::string& stored,
                                           const v1::ModelConfig& config) = nullptr;
  // Where the checkpoint's numbers are scaled at run time by config.json's multipliers that
  // attnserve folds into the weights (null otherwise): applied to the loaded float32 tensors,
  // under Model's names, before the model is built (Falcon-H1's µP multipliers). An error names
  // the key.
  absl::Status (*fold_weights)(const ConfigJson& json, const v1::ModelConfig& config,
                               std::map<std::string, at::Tensor>* weights) = nullptr;
};

// The architecture of config.json's model_type, or null (attnserve's own schema).
const Architecture* FindArchitecture(absl::string_view model_type);

// Every registered architecture, in the registry's order.
const std::vector<const Architecture*>& Architectures();

}  // namespace attnserve::model::architectures

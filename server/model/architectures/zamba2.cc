// Zamba2ForCausalLM (model_type "zamba2"; Zamba2-1.2B, 2.7B, 7B): transformers'
// src/transformers/models/zamba2/modeling_zamba2.py at commit
// 00511f5df3b63c48b31496072ec35d6ff3ffa6c6 and configuration_zamba2.py at commit
// 8adb89369451236ed02d3fb43f3c17f3e9d94aae (transformers 4.47.1 has no Zamba2).
// Every layer is a Mamba-2 layer (Zamba2MambaMixer: in_proj to [gate, x·B·C, dt], conv + silu,
// the SSD scan over n_mamba_heads heads of mamba_headdim = mamba_expand · hidden / n_mamba_heads
// in mamba_ngroups groups, the gated RMSNorm per group with ε 1e-5, out_proj;
// kernels/mamba2/). The "hybrid" layers of layers_block_type first run one of num_mem_blocks
// shared blocks, in turn (Zamba2Model.get_layers' cycle: the j-th hybrid layer runs block
// j % num_mem_blocks; Zamba2AttentionDecoderLayer): RMSNorm of concat(hidden, input
// embeddings), attention over 2·hidden scaled by (head_dim / 2)^-1/2 with rotary positions over
// the whole head_dim = 2·hidden / num_attention_heads where use_mem_rope, RMSNorm, a gated MLP
// of hidden_act, no residual; then their own `linear` of its output is added to the Mamba
// layer's input (server/model/shared_block.h). Each hybrid layer j has its own adapters
// (Zamba2's "LoRA"): on q, k and v (linear_{q,k,v}_adapter_list.j, use_shared_attention_adapter)
// and, always, on the MLP's gate_up_proj (gate_up_proj_adapter_list.j), rank adapter_rank.
//
// Where upstream's two Mamba paths disagree, attnserve follows cuda_kernels_forward (mamba_ssm's
// kernels, which the models were trained and are served with; vLLM's too), not torch_forward:
// dt = softplus(dt + dt_bias) clamped to time_step_limit where the config has one (torch_forward
// clamps at time_step_min instead), and the SSD scan's inter-chunk recurrence as Mamba-2 defines
// it (torch_forward sums it over the wrong axis: wrong past chunk_size tokens;
// tests/golden/zamba2_reference.py measures it).
//
// Refused by name: add_bias_linear, use_conv_bias false, a rms_norm_eps other than 1e-5 (the
// gated norm's is fixed there; attnserve's Mamba-2 takes the model's), a mamba_expand · hidden
// that n_mamba_heads does not divide, a layers_block_type entry other than mamba or hybrid, a
// rope type other than default.
#include <cmath>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "kernels/common/status_macros.h"
#include "kernels/moe/gated_mlp.h"
#include "server/model/architectures/architecture.h"
#include "server/model/architectures/mamba.h"
#include "server/model/architectures/tensor_names.h"
#include "server/model/architectures/zamba_family.h"
#include "server/model/shared_block.h"

namespace attnserve::model::architectures {
namespace {

// Zamba2Config's default layers_block_type (54 layers, Zamba2-2.7B's).
std::vector<std::string> DefaultBlockTypes() {
  std::vector<std::string> types = {"mamba"};
  for (int i = 0; i < 7; ++i) {
    for (int j = 0; j < 5; ++j) types.push_back("mamba");
    types.push_back("hybrid");
  }
  for (const auto& [kind, n] : {std::pair<const char*, int>{"mamba", 4},
                                {"hybrid", 1},
                                {"mamba", 3},
                                {"hybrid", 1},
                                {"mamba", 2}}) {
    for (int j = 0; j < n; ++j) types.push_back(kind);
  }
  return types;
}

absl::Status ReadRope(const ConfigJson& json, int64_t head_dim, v1::ModelConfig* c) {
  ASSIGN_OR_RETURN(const bool rope, BoolKey(json, "use_mem_rope", false));
  ASSIGN_OR_RETURN(const bool long_context, BoolKey(json, "use_long_context", false));
  ASSIGN_OR_RETURN(double theta, NumberKey(json, "rope_theta", 10000.0));
  bool has_parameters = false;
  ASSIGN_OR_RETURN(const ConfigJson parameters,
                   ObjectKey(json, "rope_parameters", &has_parameters));
  if (has_parameters) {  // transformers' newer spelling
    ASSIGN_OR_RETURN(theta, NumberKey(parameters, "rope_theta", theta));
    ASSIGN_OR_RETURN(const std::string type, StringKey(parameters, "rope_type", "default"));
    if (type != "default") return Unsupported("rope_parameters.rope_type", type, "default is");
  }
  if (!rope) return absl::OkStatus();  // no positions
  // Zamba2Config: use_long_context rescales the base (a = 8) and extends the context.
  if (long_context) {
    theta *= std::pow(8.0, static_cast<double>(head_dim) / static_cast<double>(head_dim - 2));
    c->set_max_sequence_length(16384);
    c->set_max_position_embeddings(16384);
  }
  if (!(theta > 0)) return Unsupported("rope_theta", absl::StrCat(theta), "it must be > 0");
  c->set_rope_theta(theta);
  return absl::OkStatus();
}

absl::StatusOr<v1::ModelConfig> ReadZamba2Config(const ConfigJson& json) {
  v1::ModelConfig c;
  c.set_model_type("zamba2");
  ASSIGN_OR_RETURN(const int64_t vocab, IntKey(json, "vocab_size", 32000));
  ASSIGN_OR_RETURN(const int64_t hidden, IntKey(json, "hidden_size", 2560));
  ASSIGN_OR_RETURN(const int64_t mlp, IntKey(json, "intermediate_size", 4 * hidden));
  ASSIGN_OR_RETURN(const int64_t layers, LayerCount(json, "num_hidden_layers", 54));
  ASSIGN_OR_RETURN(const int64_t heads, IntKey(json, "num_attention_heads", 32));
  if (heads <= 0) return Unsupported("num_attention_heads", absl::StrCat(heads), "it must be > 0");
  ASSIGN_OR_RETURN(const int64_t kv_heads, IntKey(json, "num_key_value_heads", heads));
  ASSIGN_OR_RETURN(const int64_t d_state, IntKey(json, "mamba_d_state", 64));
  ASSIGN_OR_RETURN(const int64_t d_conv, IntKey(json, "mamba_d_conv", 4));
  ASSIGN_OR_RETURN(const int64_t expand, IntKey(json, "mamba_expand", 2));
  ASSIGN_OR_RETURN(const int64_t groups, IntKey(json, "mamba_ngroups", 1));
  ASSIGN_OR_RETURN(const int64_t mamba_heads, IntKey(json, "n_mamba_heads", 8));
  ASSIGN_OR_RETURN(const int64_t chunk, IntKey(json, "chunk_size", 256));
  ASSIGN_OR_RETURN(const bool bias, BoolKey(json, "add_bias_linear", false));
  ASSIGN_OR_RETURN(const bool conv_bias, BoolKey(json, "use_conv_bias", true));
  ASSIGN_OR_RETURN(const std::string act, StringKey(json, "hidden_act", "gelu"));
  ASSIGN_OR_RETURN(const double eps, NumberKey(json, "rms_norm_eps", 1e-5));
  ASSIGN_OR_RETURN(const int64_t max_positions, IntKey(json, "max_position_embeddings", 4096));
  ASSIGN_OR_RETURN(const bool tie, BoolKey(json, "tie_word_embeddings", true));
  ASSIGN_OR_RETURN(const int64_t blocks, IntKey(json, "num_mem_blocks", 1));
  ASSIGN_OR_RETURN(const bool attention_adapters,
                   BoolKey(json, "use_shared_attention_adapter", false));
  ASSIGN_OR_RETURN(const int64_t rank, IntKey(json, "adapter_rank", 128));
  ASSIGN_OR_RETURN(std::vector<std::string> types, StringListKey(json, "layers_block_type"));
  if (types.empty()) types = DefaultBlockTypes();
  if (static_cast<int64_t>(types.size()) != layers) {
    return Unsupported("layers_block_type", absl::StrCat(types.size(), " entries"),
                       absl::StrCat("one per layer: ", layers));
  }
  if (bias) return Unsupported("add_bias_linear", "true", "attnserve's Mamba-2 has no biases");
  if (!conv_bias) return Unsupported("use_conv_bias", "false", "conv1d.bias is expected");
  if (eps != 1e-5) {
    return Unsupported("rms_norm_eps", absl::StrCat(eps),
                       "Zamba2's gated norm takes 1e-5 whatever it says, the other norms it: "
                       "only 1e-5 is");
  }
  bool known_act = false;
  kernels::ParseMlpActivation(act, &known_act);
  if (!known_act) return Unsupported("hidden_act", act, "gelu, gelu_pytorch_tanh and silu are");
  if (mamba_heads <= 0 || (expand * hidden) % mamba_heads != 0) {
    return Unsupported(
        "n_mamba_heads", absl::StrCat(mamba_heads),
        absl::StrCat("it must divide mamba_expand · hidden_size = ", expand * hidden));
  }
  if (blocks < 1) return Unsupported("num_mem_blocks", absl::StrCat(blocks), "it must be >= 1");
  if (rank < 1) return Unsupported("adapter_rank", absl::StrCat(rank), "it must be >= 1");

  const int64_t head_dim = 2 * hidden / heads;  // Zamba2Config.attention_head_dim
  SetZambaCommonKeys({vocab, hidden, mlp, heads, kv_heads, head_dim, act, eps, max_positions, tie},
                     &c);
  c.set_max_position_embeddings(max_positions);
  RETURN_IF_ERROR(ReadRope(json, head_dim, &c));
  c.set_state_size(d_state);
  c.set_conv_kernel(d_conv);
  c.set_expand(expand);
  c.set_ssm_num_heads(mamba_heads);
  c.set_ssm_n_groups(groups);
  c.set_ssm_chunk_size(chunk);
  RETURN_IF_ERROR(ReadTimeStepLimit(json, &c));
  c.set_num_shared_blocks(blocks);
  if (attention_adapters) c.set_shared_attention_adapter_rank(rank);
  c.set_shared_mlp_adapter_rank(rank);  // Zamba2MLP always has them
  RETURN_IF_ERROR(SetZambaLayers(types, "mamba2", &c));
  return c;
}

// The hybrid layers' indices, in order.
std::vector<int> HybridLayers(const v1::ModelConfig& c) {
  std::vector<int> out;
  for (int i = 0; i < c.shared_block_layers_size(); ++i) {
    if (c.shared_block_layers(i)) out.push_back(i);
  }
  return out;
}

// A shared block's tensor as stored under model.layers.{layer}.shared_transformer.{rest}.
std::vector<TensorPart> SharedTransformerTensors(int layer, absl::string_view rest,
                                                 const v1::ModelConfig& c,
                                                 const std::string& stored) {
  const std::vector<int> hybrid = HybridLayers(c);
  const auto at = std::find(hybrid.begin(), hybrid.end(), layer);
  if (at == hybrid.end()) return {{stored}};  // not a hybrid layer: unexpected
  const int64_t block = (at - hybrid.begin()) % SharedBlockCount(c);
  const std::string prefix = absl::StrCat("backbone.shared.", block, ".");
  if (rest == "input_layernorm.weight") return {{prefix + "norm.weight"}};
  if (rest == "pre_ff_layernorm.weight") return {{prefix + "mlp_norm.weight"}};
  if (rest == "feed_forward.down_proj.weight") return {{prefix + "mlp.down_proj.weight"}};
  if (rest == "feed_forward.gate_up_proj.weight") {  // torch.chunk(2): gate rows first
    const int64_t mlp = c.intermediate_size();
    return {{prefix + "mlp.gate_proj.weight", 0, 0, mlp},
            {prefix + "mlp.up_proj.weight", 0, mlp, mlp}};
  }
  for (const char* proj : {"q_proj", "k_proj", "v_proj", "o_proj"}) {
    if (rest == absl::StrCat("self_attn.", proj, ".weight")) {
      return {{absl::StrCat(prefix, "mixer.", proj, ".weight")}};
    }
  }
  // self_attn.linear_{q,k,v}_adapter_list.{j}.{0,1}.weight, feed_forward.gate_up_proj_adapter_
  // list.{j}.{0,1}.weight: hybrid layer j's adapter (0: down, 1: up), held by its block.
  const std::vector<std::string> parts = absl::StrSplit(rest, '.');
  int j = -1;
  if (parts.size() == 5 && parts[4] == "weight" && (parts[3] == "0" || parts[3] == "1") &&
      absl::SimpleAtoi(parts[2], &j) && j >= 0 && j < static_cast<int>(hybrid.size()) &&
      j % SharedBlockCount(c) == block) {
    std::string target;
    if (parts[0] == "feed_forward" && parts[1] == "gate_up_proj_adapter_list") {
      target = "gate_up_proj";
    } else if (parts[0] == "self_attn") {
      for (const char* p : {"q", "k", "v"}) {
        if (parts[1] == absl::StrCat("linear_", p, "_adapter_list"))
          target = absl::StrCat(p, "_proj");
      }
    }
    if (!target.empty()) {
      return {{absl::StrCat("backbone.layers.", hybrid[j], ".shared_adapter.", target,
                            parts[3] == "0" ? ".down.weight" : ".up.weight")}};
    }
  }
  return {{stored}};  // unexpected
}

// model.embed_tokens -> backbone.embeddings, model.final_layernorm -> backbone.norm_f;
// model.layers.N.{mamba., mamba_decoder.mamba.} -> backbone.layers.N.mixer.,
// {input_layernorm, mamba_decoder.input_layernorm} -> norm, linear -> shared_linear;
// model.layers.N.shared_transformer.* -> the block of hybrid layer N (shared_block.h's names),
// whichever hybrid layers hold it; model.rotary_emb's buffers dropped.
std::vector<TensorPart> Zamba2Tensors(const std::string& stored, const v1::ModelConfig& c) {
  if (stored == "model.embed_tokens.weight") return {{"backbone.embeddings.weight"}};
  if (stored == "model.final_layernorm.weight") return {{"backbone.norm_f.weight"}};
  if (absl::StartsWith(stored, "model.rotary_emb.")) return {{""}};
  int layer = -1;
  absl::string_view rest;
  if (!SplitLayerName(stored, &layer, &rest)) return {{stored}};
  const std::string ours = absl::StrCat("backbone.layers.", layer, ".");
  if (absl::ConsumePrefix(&rest, "shared_transformer.")) {
    return SharedTransformerTensors(layer, rest, c, stored);
  }
  absl::ConsumePrefix(&rest, "mamba_decoder.");
  if (absl::ConsumePrefix(&rest, "mamba.")) return {{absl::StrCat(ours, "mixer.", rest)}};
  if (rest == "input_layernorm.weight") return {{ours + "norm.weight"}};
  if (rest == "linear.weight") return {{ours + "shared_linear.weight"}};
  return {{stored}};
}

}  // namespace

extern const Architecture kZamba2 = {"zamba2", "Zamba2ForCausalLM", &ReadZamba2Config, nullptr,
                                     nullptr,  &Zamba2Tensors};

}  // namespace attnserve::model::architectures

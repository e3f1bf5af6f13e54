// FalconH1ForCausalLM (model_type "falcon_h1": TII's Falcon-H1, 90M "tiny" to 34B):
// transformers' src/transformers/models/falcon_h1/modeling_falcon_h1.py at commit
// 68c08116ff67bbc0b9a72179d72da9dc2355a4dc (its modular_falcon_h1.py at 3c0a5c70) and
// configuration_falcon_h1.py at 7abb76c59ed6042dde3b0046841dfa69643e96cd. Every layer runs
// attention and Mamba-2 side by side on the same normed input and adds both to the residual:
//   n = input_layernorm(h)
//   h = h + ssm_out_multiplier · mamba(n) + attention_out_multiplier · attention(n ·
//       attention_in_multiplier)
//   h = h + down_multiplier · down(silu(gate_multiplier · gate(m)) · up(m)),  m =
//   pre_ff_layernorm(h)
// The mamba's in_proj reads n · ssm_in_multiplier and its output is times the mup vector (the five
// ssm_multipliers over its z, x, B, C and dt rows); the attention's keys are times
// key_multiplier; the input embeddings times embedding_multiplier; the logits times
// lm_head_multiplier. The Mamba-2 mixer: mamba_d_ssm wide (null: mamba_expand · hidden) in
// mamba_n_heads heads of mamba_d_head, mamba_n_groups groups, then y · silu(z) through
// FalconH1RMSNormGated per group (mamba_rms_norm; the norm first with mamba_norm_before_gate) or
// without a norm. Attention is Llama's (rotary positions, GQA, head_dim).
//
// In attnserve: layer i is "mamba2" (backbone.layers.i.mixer.*) with a parallel "standard"
// (parallel_mixer.*); every multiplier but the embedding's and the logits' (embedding_multiplier,
// logits_divisor = 1 / lm_head_multiplier) is folded into the weights it scales at load
// (FoldFalconH1Multipliers): the products are the same up to float32 rounding of the weights.
//
// Refused by name: mamba_proj_bias, projectors_bias, attention_bias and mlp_bias true (biases the
// multipliers would have to treat apart), mamba_conv_bias false, hidden_act other than silu.
#include <ATen/ATen.h>

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/common/status_macros.h"
#include "server/model/architectures/architecture.h"
#include "server/model/architectures/decoder_only.h"
#include "server/model/architectures/mamba.h"
#include "server/model/architectures/tensor_names.h"

namespace attnserve::model::architectures {
namespace {

absl::StatusOr<v1::ModelConfig> ReadFalconH1Config(const ConfigJson& json) {
  DecoderDefaults defaults;  // FalconH1Config's
  defaults.vocab_size = 128000;
  defaults.intermediate_size = 14336;
  defaults.num_key_value_heads = 8;
  defaults.max_position_embeddings = 8192;
  defaults.rms_norm_eps = 1e-5;
  defaults.rope_theta = 1e5;
  ASSIGN_OR_RETURN(v1::ModelConfig c, ReadDecoderOnlyConfig(json, defaults));
  c.set_model_type("falcon_h1");
  for (const char* key : {"mamba_proj_bias", "projectors_bias", "attention_bias", "mlp_bias"}) {
    ASSIGN_OR_RETURN(const bool bias, BoolKey(json, key, false));
    if (bias) return Unsupported(key, "true", "Falcon-H1's biases are not built (none released)");
  }
  ASSIGN_OR_RETURN(const std::string act, StringKey(json, "hidden_act", "silu"));
  if (act != "silu") return Unsupported("hidden_act", act, "silu is");
  const int layers = c.layers_size();
  c.clear_layers();
  for (int i = 0; i < layers; ++i) {
    c.add_layers("mamba2");
    c.add_parallel_layers("standard");
  }
  RETURN_IF_ERROR(ReadMambaNKeys(json, &c, /*falcon_h1=*/true));
  ASSIGN_OR_RETURN(const bool normed, BoolKey(json, "mamba_rms_norm", false));
  ASSIGN_OR_RETURN(const bool norm_first, BoolKey(json, "mamba_norm_before_gate", true));
  c.set_ssm_norm(!normed ? "gate" : norm_first ? "norm_then_gate" : "gate_then_norm");
  ASSIGN_OR_RETURN(const double embedding, NumberKey(json, "embedding_multiplier", 1.0));
  ASSIGN_OR_RETURN(const double lm_head, NumberKey(json, "lm_head_multiplier", 1.0));
  if (!(embedding > 0) || !(lm_head > 0)) {
    return Unsupported("embedding_multiplier", absl::StrCat(embedding, ", ", lm_head),
                       "it and lm_head_multiplier must be > 0");
  }
  c.set_embedding_multiplier(embedding);
  c.set_logits_divisor(1.0 / lm_head);
  return c;
}

// A number of config.json, or its list's entries (ssm_multipliers, mlp_multipliers).
absl::StatusOr<std::vector<double>> Multipliers(const ConfigJson& json, const char* key,
                                                size_t count) {
  ASSIGN_OR_RETURN(std::vector<double> values, NumberListKey(json, key));
  if (!Has(json, key)) values.assign(count, 1.0);
  if (values.size() != count) {
    return Unsupported(key, absl::StrCat(values.size(), " values"), absl::StrCat(count, " are"));
  }
  return values;
}

absl::Status FoldFalconH1Multipliers(const ConfigJson& json, const v1::ModelConfig& c,
                                     std::map<std::string, at::Tensor>* weights) {
  ASSIGN_OR_RETURN(const double attention_in, NumberKey(json, "attention_in_multiplier", 1.0));
  ASSIGN_OR_RETURN(const double attention_out, NumberKey(json, "attention_out_multiplier", 1.0));
  ASSIGN_OR_RETURN(const double key, NumberKey(json, "key_multiplier", 1.0));
  ASSIGN_OR_RETURN(const double ssm_in, NumberKey(json, "ssm_in_multiplier", 1.0));
  ASSIGN_OR_RETURN(const double ssm_out, NumberKey(json, "ssm_out_multiplier", 1.0));
  ASSIGN_OR_RETURN(const std::vector<double> mup, Multipliers(json, "ssm_multipliers", 5));
  ASSIGN_OR_RETURN(const std::vector<double> mlp, Multipliers(json, "mlp_multipliers", 2));
  const int64_t d_ssm = c.ssm_inner_size() > 0 ? c.ssm_inner_size() : c.expand() * c.hidden_size();
  const int64_t group_width = c.ssm_n_groups() * c.state_size();
  // in_proj's rows: z, x, B, C, dt.
  const std::vector<int64_t> sections = {d_ssm, d_ssm, group_width, group_width, c.ssm_num_heads()};
  auto scale = [&](const std::string& name, double factor) {
    at::Tensor& t = weights->at(name);
    t = t * factor;  // not in place: a loaded tensor may be a view of a stored one
  };
  for (int i = 0; i < c.layers_size(); ++i) {
    const std::string layer = absl::StrCat("backbone.layers.", i, ".");
    at::Tensor& in_proj = weights->at(layer + "mixer.in_proj.weight");
    std::vector<at::Tensor> rows;
    int64_t start = 0;
    for (size_t s = 0; s < sections.size(); ++s) {
      rows.push_back(in_proj.narrow(0, start, sections[s]) * (mup[s] * ssm_in));
      start += sections[s];
    }
    in_proj = at::cat(rows, 0);
    scale(layer + "mixer.out_proj.weight", ssm_out);
    scale(layer + "parallel_mixer.q_proj.weight", attention_in);
    scale(layer + "parallel_mixer.k_proj.weight", attention_in * key);
    scale(layer + "parallel_mixer.v_proj.weight", attention_in);
    scale(layer + "parallel_mixer.o_proj.weight", attention_out);
    scale(layer + "mlp.gate_proj.weight", mlp[0]);
    scale(layer + "mlp.down_proj.weight", mlp[1]);
  }
  return absl::OkStatus();
}

// HybridDecoderModelName's, but self_attn is the parallel mixer.
std::string FalconH1ModelName(const std::string& stored) {
  return HybridDecoderModelName(stored, ".parallel_mixer.");
}

}  // namespace

extern const Architecture kFalconH1 = {
    "falcon_h1", "FalconH1ForCausalLM",   &ReadFalconH1Config, &FalconH1ModelName, nullptr,
    nullptr,     &FoldFalconH1Multipliers};

}  // namespace attnserve::model::architectures

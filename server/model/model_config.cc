#include "server/model/model_config.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/model/architectures/architecture.h"
#include "server/model/layer_layout.h"
#include "server/model/python_json.h"
#include "server/model/shared_block.h"

namespace attnserve::model {
namespace {

using google::protobuf::Struct;

// transformers' RwkvModel.ln_out: nn.LayerNorm(hidden_size), PyTorch's default epsilon.
constexpr double kHuggingFaceLnOutEpsilon = 1e-5;

// eps · 4^(halvings): the epsilon of a LayerNorm that reads a stream halved `halvings` times.
double Rescaled(double eps, int64_t halvings) {
  return std::ldexp(eps, static_cast<int>(std::min<int64_t>(2 * halvings, 1 << 20)));
}

}  // namespace

void FillModelConfigDefaults(v1::ModelConfig* c) {
  if (c->model_type().empty()) c->set_model_type("attnserve");
  if (c->num_heads() == 0) c->set_num_heads(8);
  if (c->linformer_k() == 0) c->set_linformer_k(64);
  if (c->linformer_max_len() == 0) c->set_linformer_max_len(4096);
  if (c->state_size() == 0) c->set_state_size(16);
  if (c->conv_kernel() == 0) c->set_conv_kernel(4);
  if (c->expand() == 0) c->set_expand(2);
  if (c->norm_epsilon() == 0) c->set_norm_epsilon(1e-5);
  if (c->max_sequence_length() == 0) c->set_max_sequence_length(1 << 20);
  const auto uses = [&](const char* kind) {  // as a layer's mixer or beside one
    return std::find(c->layers().begin(), c->layers().end(), kind) != c->layers().end() ||
           std::find(c->parallel_layers().begin(), c->parallel_layers().end(), kind) !=
               c->parallel_layers().end();
  };
  if (uses("mamba2")) {
    if (c->ssm_n_groups() == 0) c->set_ssm_n_groups(1);
    if (c->ssm_chunk_size() == 0) c->set_ssm_chunk_size(256);
    if (c->ssm_num_heads() == 0)
      c->set_ssm_num_heads(std::max<int64_t>(1, c->expand() * c->hidden_size() / 64));
  }
  if (c->num_experts() > 0 && c->num_experts_per_tok() == 0) c->set_num_experts_per_tok(2);
  if (uses("sparse")) {
    if (c->sparse_pattern().empty()) c->set_sparse_pattern("strided");
    if (c->sparse_stride() == 0) c->set_sparse_stride(128);
    if (c->sparse_c() == 0 && c->sparse_pattern() == "fixed") c->set_sparse_c(8);
  }
}

absl::StatusOr<v1::ModelConfig> ParseModelConfigJson(const std::string& python_json) {
  // NaN and Infinity as Python's json writes them (python_json.h).
  const std::string json = PythonJsonToJson(python_json);
  Struct root;
  auto status = google::protobuf::util::JsonStringToMessage(json, &root);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json is not a JSON object: ", status.message().as_string()));
  }
  v1::ModelConfig config;
  auto type = root.fields().find("model_type");
  std::string model_type =
      type != root.fields().end() ? type->second.string_value() : std::string();
  // mamba_ssm's folders have no model_type; their config.json names the width d_model.
  if (type == root.fields().end() && root.fields().count("d_model") &&
      root.fields().count("n_layer")) {
    model_type = "mamba_ssm";
  }
  if (const architectures::Architecture* hf = architectures::FindArchitecture(model_type)) {
    absl::StatusOr<v1::ModelConfig> read = hf->read_config(root);
    if (!read.ok()) return read.status();
    config = *std::move(read);
  } else {
    google::protobuf::util::JsonParseOptions options;
    options.ignore_unknown_fields = true;
    status = google::protobuf::util::JsonStringToMessage(json, &config, options);
    if (!status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.json: ", status.message().as_string()));
    }
  }
  FillModelConfigDefaults(&config);
  if (absl::Status s = ValidateModelConfig(config); !s.ok()) return s;
  return config;
}

namespace {

absl::Status ValidateExperts(const v1::ModelConfig& c) {
  if (c.num_experts() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("config: num_experts must be >= 0 (0: dense MLPs), got ", c.num_experts()));
  }
  if (c.num_experts() == 0) {
    if (c.expert_layers_size() > 0 || c.num_experts_per_tok() != 0 || !c.moe_router().empty() ||
        c.moe_shared_expert_size() != 0 || c.moe_norm_topk_prob() ||
        c.moe_routed_scaling_factor() != 0) {
      return absl::InvalidArgumentError(
          "config: expert_layers, num_experts_per_tok, moe_router and the moe_ fields need "
          "num_experts > 0");
    }
    return absl::OkStatus();
  }
  if (c.num_experts_per_tok() < 1 || c.num_experts_per_tok() > c.num_experts()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config: num_experts_per_tok must be in [1, num_experts = ", c.num_experts(),
                     "], got ", c.num_experts_per_tok()));
  }
  if (c.intermediate_size() <= 0) {
    return absl::InvalidArgumentError("config: experts need intermediate_size > 0");
  }
  if (c.expert_layers_size() != 0 && c.expert_layers_size() != c.layers_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config: expert_layers has ", c.expert_layers_size(), " entries for ",
                     c.layers_size(), " layers (one per layer, or none: every layer)"));
  }
  if (absl::StatusOr<kernels::RouterKind> r = kernels::ParseRouterKind(c.moe_router()); !r.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("config: ", r.status().message()));
  }
  if (c.moe_shared_expert_size() < 0 || !(c.moe_routed_scaling_factor() >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config: moe_shared_expert_size and moe_routed_scaling_factor must be >= 0, got ",
        c.moe_shared_expert_size(), " and ", c.moe_routed_scaling_factor()));
  }
  return absl::OkStatus();
}

absl::Status ValidateSharedBlock(const v1::ModelConfig& c) {
  if (!(c.attention_scale() >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config: attention_scale must be >= 0 (0: head_dim^-1/2), got ", c.attention_scale()));
  }
  if (c.shared_block_layers_size() != 0 && c.shared_block_layers_size() != c.layers_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config: shared_block_layers has ", c.shared_block_layers_size(),
                     " entries for ", c.layers_size(), " layers (one per layer, or none)"));
  }
  for (auto [field, value] :
       {std::pair<const char*, int64_t>{"num_shared_blocks", c.num_shared_blocks()},
        {"shared_attention_adapter_rank", c.shared_attention_adapter_rank()},
        {"shared_mlp_adapter_rank", c.shared_mlp_adapter_rank()}}) {
    if (value < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("config: ", field, " must be >= 0, got ", value));
    }
    if (value > 0 && !UsesSharedBlock(c)) {
      return absl::InvalidArgumentError(
          absl::StrCat("config: ", field, " needs shared_block_layers to mark a layer"));
    }
  }
  if (!UsesSharedBlock(c)) return absl::OkStatus();
  if (c.intermediate_size() <= 0 || c.num_experts() > 0 || c.norm() == "layer_norm") {
    return absl::InvalidArgumentError(
        "config: the shared block needs intermediate_size > 0 (its MLP), RMSNorms and no experts");
  }
  for (int i = 0; i < c.layers_size(); ++i) {
    if (LayerUsesSharedBlock(c, i) && kernels::MixerOwnsNorms(LayerMixerConfig(c, i).kind)) {
      return absl::InvalidArgumentError(absl::StrCat("config: layers[", i, "] (", c.layers(i),
                                                     ") owns its norms: no shared block there"));
    }
  }
  if (absl::Status s = kernels::ValidateMixerConfig(SharedBlock::AttentionConfig(c)); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("config: the shared block: ", s.message()));
  }
  return absl::OkStatus();
}

}  // namespace

bool LayerHasExperts(const v1::ModelConfig& c, int layer) {
  if (c.num_experts() <= 0 || !LayerHasMlp(c, layer)) return false;
  return c.expert_layers_size() == 0 || (layer < c.expert_layers_size() && c.expert_layers(layer));
}

kernels::MoeConfig LayerMoeConfig(const v1::ModelConfig& c) {
  kernels::MoeConfig m;
  m.d_model = c.hidden_size();
  m.d_ff = c.intermediate_size();
  m.num_experts = c.num_experts();
  m.top_k = c.num_experts_per_tok();
  m.router = kernels::ParseRouterKind(c.moe_router()).value_or(kernels::RouterKind::kSoftmaxTopK);
  m.act = kernels::ParseMlpActivation(c.hidden_act());
  m.gated = !c.plain_mlp();
  m.shared_d_ff = c.moe_shared_expert_size();
  m.normalize = c.moe_norm_topk_prob();
  m.scaling = c.moe_routed_scaling_factor() > 0 ? c.moe_routed_scaling_factor() : 1.0;
  return m;
}

absl::Status ValidateModelConfig(const v1::ModelConfig& c) {
  auto positive = [](const char* field, int64_t v) -> absl::Status {
    if (v > 0) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("config: ", field, " must be > 0, got ", v));
  };
  for (auto [field, value] : {std::pair<const char*, int64_t>{"vocab_size", c.vocab_size()},
                              {"hidden_size", c.hidden_size()},
                              {"max_sequence_length", c.max_sequence_length()}}) {
    if (absl::Status s = positive(field, value); !s.ok()) return s;
  }
  if (c.layers_size() == 0) return absl::InvalidArgumentError("config: layers is empty");
  if (c.intermediate_size() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("config: intermediate_size must be >= 0, got ", c.intermediate_size()));
  }
  if (!(c.norm_epsilon() > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("config: norm_epsilon must be > 0, got ", c.norm_epsilon()));
  }
  if (!c.norm().empty() && c.norm() != "rms_norm" && c.norm() != "layer_norm") {
    return absl::InvalidArgumentError(absl::StrCat(
        "config: norm must be \"rms_norm\" or \"layer_norm\", got \"", c.norm(), "\""));
  }
  if (c.final_norm_epsilon() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config: final_norm_epsilon must be >= 0 (0: norm_epsilon), got ", c.final_norm_epsilon()));
  }
  for (auto [field, value] :
       {std::pair<const char*, double>{"embedding_multiplier", c.embedding_multiplier()},
        {"residual_multiplier", c.residual_multiplier()},
        {"logits_divisor", c.logits_divisor()}}) {
    if (!(value >= 0) || !std::isfinite(value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("config: ", field, " must be finite and >= 0 (0: 1), got ", value));
    }
  }
  if (c.rwkv_rescale_every() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config: rwkv_rescale_every must be >= 0 (0: never), got ", c.rwkv_rescale_every()));
  }
  if (c.rwkv_rescale_every() > 0) {
    for (int i = 0; i < c.layers_size(); ++i) {
      if (c.layers(i) != "rwkv") {
        return absl::InvalidArgumentError(
            absl::StrCat("config: rwkv_rescale_every applies to models of rwkv layers only; "
                         "layers[",
                         i, "] is ", c.layers(i)));
      }
    }
    // The kernels take epsilons as float32.
    if (!(FinalNormEpsilon(c) <= std::numeric_limits<float>::max())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config: rwkv_rescale_every ", c.rwkv_rescale_every(), " over ", c.layers_size(),
          " layers halves the hidden state until LayerNorm's epsilon overflows float32"));
    }
  }
  if (!c.linformer_extend().empty() && c.linformer_extend() != "interpolate") {
    return absl::InvalidArgumentError(absl::StrCat(
        "config: linformer_extend must be \"\" (refuse inputs longer than linformer_max_len) "
        "or \"interpolate\", got \"",
        c.linformer_extend(), "\""));
  }
  if (c.rwkv_attention_size() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("config: rwkv_attention_size must be >= 0 (0: hidden_size), got ",
                     c.rwkv_attention_size()));
  }
  if (c.time_step_limit_size() != 0 && c.time_step_limit_size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("config: time_step_limit must be [min, max] (or absent), got ",
                     c.time_step_limit_size(), " values"));
  }
  if (c.attention_windows_size() != 0 && c.attention_windows_size() != c.layers_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config: attention_windows has ", c.attention_windows_size(), " entries for ",
                     c.layers_size(), " layers (one per layer, or none)"));
  }
  bool known_act = false;
  kernels::ParseMlpActivation(c.hidden_act(), &known_act);
  if (!known_act) {
    return absl::InvalidArgumentError(
        absl::StrCat("config: hidden_act \"", c.hidden_act(),
                     "\" is not supported (silu, gelu_pytorch_tanh, gelu: gated MLPs)"));
  }
  if (c.rope_theta() < 0 || c.partial_rotary_factor() < 0 || c.partial_rotary_factor() > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config: rope_theta must be >= 0 (0: no positions) and partial_rotary_factor in [0, 1] "
        "(0: 1), got ",
        c.rope_theta(), " and ", c.partial_rotary_factor()));
  }
  if (!(c.rope_theta() > 0) && !c.rope_scaling().rope_type().empty()) {
    return absl::InvalidArgumentError("config: rope_scaling without rope_theta > 0");
  }
  for (int i = 0; i < c.layers_size(); ++i) {
    if (c.layers(i) != "standard" && i < c.attention_windows_size() && c.attention_windows(i)) {
      return absl::InvalidArgumentError(
          absl::StrCat("config: attention_windows[", i, "] is ", c.attention_windows(i),
                       " but layers[", i, "] is ", c.layers(i),
                       ": only standard layers take a window here (sliding_window "
                       "layers take sliding_window)"));
    }
  }
  if (absl::Status s = ValidateExperts(c); !s.ok()) return s;
  if (absl::Status s = ValidateSharedBlock(c); !s.ok()) return s;
  if (absl::Status s = ValidateLayerLayout(c); !s.ok()) return s;
  if (c.mamba_bcdt_norm_weights() && !(c.mamba_bcdt_rms_eps() > 0)) {
    return absl::InvalidArgumentError(
        "config: mamba_bcdt_norm_weights needs the norms: mamba_bcdt_rms_eps > 0");
  }
  for (int i = 0; i < c.layers_size(); ++i) {
    absl::StatusOr<kernels::MixerKind> kind = kernels::ParseMixerKind(c.layers(i));
    if (!kind.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("config: layers[", i, "]: ", kind.status().message()));
    }
    if (absl::Status s = kernels::ValidateMixerConfig(LayerMixerConfig(c, i)); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("config: layers[", i, "] (", c.layers(i), "): ", s.message()));
    }
  }
  return absl::OkStatus();
}

kernels::MixerConfig LayerMixerConfig(const v1::ModelConfig& c, int layer) {
  return MixerConfigOf(c, layer, c.layers(layer));
}

kernels::MixerConfig MixerConfigOf(const v1::ModelConfig& c, int layer, const std::string& kind) {
  kernels::MixerConfig m;
  m.kind = kernels::ParseMixerKind(kind).value_or(kernels::MixerKind::kStandard);
  m.d_model = c.hidden_size();
  m.num_heads = c.num_heads();
  m.causal = m.kind != kernels::MixerKind::kLinformer && !c.bidirectional();
  m.window = c.sliding_window();
  m.sinks = c.sliding_window_sinks();
  m.sparse_pattern = c.sparse_pattern();
  m.sparse_stride = c.sparse_stride();
  m.sparse_summary = c.sparse_c();
  m.performer_seed = c.performer_seed() + static_cast<uint64_t>(layer);  // one draw per layer
  m.linformer_k = c.linformer_k();
  m.max_len = c.linformer_max_len();
  m.linformer_interpolate = c.linformer_extend() == "interpolate";
  m.d_state = c.state_size();
  m.d_conv = c.conv_kernel();
  m.expand = c.expand();
  m.dt_rank = c.time_step_rank();
  m.bcdt_rms_epsilon = m.kind == kernels::MixerKind::kMamba ? c.mamba_bcdt_rms_eps() : 0.0;
  m.bcdt_norm_weights = m.bcdt_rms_epsilon > 0 && c.mamba_bcdt_norm_weights();
  m.mamba_heads =
      m.kind == kernels::MixerKind::kMamba && c.mamba_num_heads() > 1 ? c.mamba_num_heads() : 1;
  if (m.kind == kernels::MixerKind::kMamba2) {
    m.ssm_heads = c.ssm_num_heads();
    m.ssm_groups = c.ssm_n_groups();
    m.ssm_chunk_size = c.ssm_chunk_size();
    m.inner_dim = c.ssm_inner_size();
    m.ssm_norm = ParseSsmNorm(c.ssm_norm()).value_or(kernels::MixerConfig::SsmNorm::kGateThenNorm);
    if (c.time_step_limit_size() == 2) {
      m.dt_min = c.time_step_limit(0);
      m.dt_max = c.time_step_limit(1);
    }
  }
  m.conv_bias = m.kind == kernels::MixerKind::kShortConv && c.short_conv_bias();
  m.ffn_dim = c.intermediate_size();
  m.rwkv_attention_dim = c.rwkv_attention_size();
  m.norm_epsilon =
      m.kind == kernels::MixerKind::kRwkv ? RwkvLayerNormEpsilon(c, layer) : c.norm_epsilon();
  if (m.kind == kernels::MixerKind::kStandard) {
    m.num_kv_heads = c.num_key_value_heads();
    m.attention_head_dim = c.head_dim();
    m.qkv_bias = c.attention_qkv_bias();
    m.o_bias = c.attention_out_bias();
    m.attention_window = layer < c.attention_windows_size() ? c.attention_windows(layer) : 0;
    m.rope = RotaryConfigOf(c);
    m.attention_scale = c.attention_scale();
    m.qk_norm = c.attention_qk_norm();
  }
  return m;
}

kernels::RotaryConfig RotaryConfigOf(const v1::ModelConfig& c) {
  kernels::RotaryConfig r;
  if (!(c.rope_theta() > 0)) return r;  // no positions
  const v1::RopeScaling& s = c.rope_scaling();
  r.type = s.rope_type().empty() ? "default" : s.rope_type();
  r.theta = c.rope_theta();
  const int64_t head_dim = c.head_dim() > 0    ? c.head_dim()
                           : c.num_heads() > 0 ? c.hidden_size() / c.num_heads()
                                               : 0;
  // transformers: int(head_dim * partial_rotary_factor).
  r.rotary_dim = c.partial_rotary_factor() > 0
                     ? static_cast<int64_t>(head_dim * c.partial_rotary_factor())
                     : head_dim;
  r.max_position_embeddings = c.max_position_embeddings();
  r.factor = s.factor() > 0 ? s.factor() : 1.0;
  r.original_max_position_embeddings = r.type == "llama3" ? s.original_max_position_embeddings()
                                                          : c.original_max_position_embeddings();
  if (s.low_freq_factor() > 0) r.low_freq_factor = s.low_freq_factor();
  if (s.high_freq_factor() > 0) r.high_freq_factor = s.high_freq_factor();
  // transformers: `rope_scaling.get("beta_fast") or 32` (0 counts as absent there too).
  if (s.beta_fast() > 0) r.beta_fast = s.beta_fast();
  if (s.beta_slow() > 0) r.beta_slow = s.beta_slow();
  r.attention_factor = s.attention_factor();
  r.short_factor.assign(s.short_factor().begin(), s.short_factor().end());
  r.long_factor.assign(s.long_factor().begin(), s.long_factor().end());
  return r;
}

double RwkvLayerNormEpsilon(const v1::ModelConfig& c, int layer) {
  const int64_t every = c.rwkv_rescale_every();
  return every > 0 ? Rescaled(c.norm_epsilon(), layer / every) : c.norm_epsilon();
}

double FinalNormEpsilon(const v1::ModelConfig& c) {
  const double eps = c.final_norm_epsilon() > 0 ? c.final_norm_epsilon() : c.norm_epsilon();
  const int64_t every = c.rwkv_rescale_every();
  return every > 0 ? Rescaled(eps, c.layers_size() / every) : eps;
}

std::string ModelConfigToJson(const v1::ModelConfig& config) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(config, &json, options);
  return json;
}

bool UsesLayerNorm(const v1::ModelConfig& config) { return config.norm() == "layer_norm"; }

bool IsHuggingFaceMamba(const v1::ModelConfig& c) {
  if (c.intermediate_size() != 0 || UsesLayerNorm(c) || c.embedding_norm() ||
      c.mamba_bcdt_rms_eps() != 0) {
    return false;
  }
  for (const std::string& layer : c.layers()) {
    if (layer != "mamba") return false;
  }
  return true;
}

std::string HuggingFaceMambaConfigJson(const v1::ModelConfig& c) {
  const int64_t rank = c.time_step_rank() > 0 ? c.time_step_rank() : (c.hidden_size() + 15) / 16;
  return absl::StrCat(
      "{\n  \"architectures\": [\"MambaForCausalLM\"],\n  \"model_type\": \"mamba\",\n",
      "  \"vocab_size\": ", c.vocab_size(), ",\n  \"hidden_size\": ", c.hidden_size(),
      ",\n  \"num_hidden_layers\": ", c.layers_size(), ",\n  \"state_size\": ", c.state_size(),
      ",\n  \"conv_kernel\": ", c.conv_kernel(), ",\n  \"expand\": ", c.expand(),
      ",\n  \"intermediate_size\": ", c.expand() * c.hidden_size(),
      ",\n  \"time_step_rank\": ", rank, ",\n  \"layer_norm_epsilon\": ", c.norm_epsilon(),
      ",\n  \"tie_word_embeddings\": ", c.tie_word_embeddings() ? "true" : "false",
      ",\n  \"use_bias\": false,\n  \"use_conv_bias\": true\n}\n");
}

bool IsHuggingFaceRwkv(const v1::ModelConfig& c) {
  if (!UsesLayerNorm(c) || !c.embedding_norm()) return false;
  const double final_eps = c.final_norm_epsilon() > 0 ? c.final_norm_epsilon() : c.norm_epsilon();
  if (final_eps != kHuggingFaceLnOutEpsilon) return false;  // ln_out's cannot be written
  for (const std::string& layer : c.layers()) {
    if (layer != "rwkv") return false;
  }
  return true;
}

std::string HuggingFaceRwkvConfigJson(const v1::ModelConfig& c) {
  const kernels::MixerConfig m = LayerMixerConfig(c, 0);
  // The weights are written unscaled, as Hugging Face stores them (it rescales at load).
  return absl::StrCat(
      "{\n  \"architectures\": [\"RwkvForCausalLM\"],\n  \"model_type\": \"rwkv\",\n",
      "  \"vocab_size\": ", c.vocab_size(), ",\n  \"hidden_size\": ", c.hidden_size(),
      ",\n  \"num_hidden_layers\": ", c.layers_size(),
      ",\n  \"attention_hidden_size\": ", m.resolved_rwkv_attention_dim(),
      ",\n  \"intermediate_size\": ", m.resolved_ffn_dim(),
      ",\n  \"context_length\": ", std::min<int64_t>(c.max_sequence_length(), 1 << 20),
      ",\n  \"layer_norm_epsilon\": ", c.norm_epsilon(),
      ",\n  \"rescale_every\": ", c.rwkv_rescale_every(),
      ",\n  \"tie_word_embeddings\": ", c.tie_word_embeddings() ? "true" : "false",
      ",\n  \"use_cache\": true\n}\n");
}

}  // namespace attnserve::model

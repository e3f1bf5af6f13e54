#include "server/model/architectures/zamba_family.h"

#include <cmath>

#include "server/model/architectures/config_fields.h"

namespace attnserve::model::architectures {

void SetZambaCommonKeys(const ZambaCommonKeys& k, v1::ModelConfig* c) {
  c->set_vocab_size(k.vocab);
  c->set_hidden_size(k.hidden);
  c->set_intermediate_size(k.mlp);
  c->set_num_heads(k.heads);
  c->set_num_key_value_heads(k.kv_heads);
  c->set_head_dim(k.head_dim);
  c->set_attention_scale(1.0 / std::sqrt(static_cast<double>(k.head_dim) / 2));
  c->set_hidden_act(k.hidden_act);
  c->set_norm_epsilon(k.rms_norm_eps);
  c->set_max_sequence_length(k.max_positions);
  c->set_tie_word_embeddings(k.tie_word_embeddings);
}

absl::Status SetZambaLayers(const std::vector<std::string>& types, const char* mixer,
                            v1::ModelConfig* c) {
  for (const std::string& type : types) {
    if (type != "mamba" && type != "hybrid") {
      return Unsupported("layers_block_type", type, "mamba and hybrid are");
    }
    c->add_layers(mixer);
    c->add_shared_block_layers(type == "hybrid");
  }
  return absl::OkStatus();
}

}  // namespace attnserve::model::architectures

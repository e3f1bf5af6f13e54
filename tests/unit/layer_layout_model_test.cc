// Layers beyond one mixer and one MLP (server/model/layer_layout.h), in attnserve's own config:
// "none" layers that hold an MLP alone (Nemotron-H's "-" and "E" blocks), layers without an MLP
// (mlp_layers), a parallel mixer beside a layer's own (Falcon-H1's attention beside Mamba-2),
// plain relu2 MLPs. Their tensors, state slots, refusals; chunks and steps = one whole pass;
// batched rows = each alone; every part changes the logits. (The families' own folders:
// tests/integration/hf_golden_test.py.)
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "server/model/layer_layout.h"
#include "server/model/model.h"
#include "server/model/model_config.h"
#include "tests/unit/model_test_util.h"
#include "tests/unit/test_util.h"

namespace attnserve::model {
namespace {

// Layer 0: Mamba-2 with attention beside it; 1: an MLP alone; 2: attention with Mamba-2
// beside it and an MLP; 3: experts alone. d_inner 48 (not 2 · 32), the norm before the gate.
constexpr char kLayout[] = R"({"vocab_size": 80, "hidden_size": 32, "num_heads": 4,
  "num_key_value_heads": 2, "head_dim": 8, "rope_theta": 10000,
  "layers": ["mamba2", "none", "standard", "none"],
  "parallel_layers": ["standard", "", "mamba2", ""],
  "mlp_layers": [false, true, true, true], "expert_layers": [false, false, false, true],
  "intermediate_size": 40, "hidden_act": "relu2", "plain_mlp": true,
  "num_experts": 4, "num_experts_per_tok": 2, "moe_router": "sigmoid_topk",
  "moe_shared_expert_size": 24, "moe_norm_topk_prob": true, "moe_routed_scaling_factor": 2.0,
  "ssm_num_heads": 6, "ssm_inner_size": 48, "ssm_n_groups": 2, "state_size": 8,
  "ssm_chunk_size": 5, "ssm_norm": "norm_then_gate"})";

v1::ModelConfig Layout() {
  auto c = ParseModelConfigJson(kLayout);
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

TEST(LayerLayoutModelTest, TensorsAndStateSlots) {
  const v1::ModelConfig c = Layout();
  EXPECT_TRUE(LayerHasParallelMixer(c, 0));
  EXPECT_FALSE(LayerHasMlp(c, 0));
  EXPECT_TRUE(LayerHasMlp(c, 1));
  EXPECT_TRUE(LayerHasExperts(c, 3));
  EXPECT_EQ(ParallelMixerConfig(c, 2).d_inner(), 48);
  std::set<std::string> names;
  for (const kernels::WeightSpec& spec : Model::ExpectedTensors(c)) names.insert(spec.name);
  for (const char* present :
       {"backbone.layers.0.norm.weight", "backbone.layers.0.parallel_mixer.q_proj.weight",
        "backbone.layers.0.mixer.in_proj.weight", "backbone.layers.1.mlp_norm.weight",
        "backbone.layers.1.mlp.up_proj.weight", "backbone.layers.2.parallel_mixer.A_log",
        "backbone.layers.3.mlp.router.correction_bias",
        "backbone.layers.3.mlp.shared_expert.up_proj.weight"}) {
    EXPECT_TRUE(names.count(present)) << present;
  }
  for (const char* absent :
       {"backbone.layers.1.norm.weight", "backbone.layers.0.mlp_norm.weight",
        "backbone.layers.1.mlp.gate_proj.weight", "backbone.layers.0.mixer.norm.weight.x",
        "backbone.layers.3.norm.weight"}) {
    EXPECT_FALSE(names.count(absent)) << absent;
  }
  auto m = Model::Create("layout", c, Model::RandomWeights(c, 3));
  ASSERT_TRUE(m.ok()) << m.status();
  auto state = (*m)->NewState();
  ASSERT_TRUE(state.ok());
  // Four layers' slots, then the two parallel mixers': layer 0's KV cache, layer 2's Mamba-2.
  ASSERT_EQ(state->layers.size(), 6u);
  EXPECT_TRUE(state->layers[1].tensors.empty());   // an MLP alone holds nothing
  EXPECT_EQ(state->layers[5].tensors.size(), 2u);  // conv and SSM states
  // Mamba-2 (conv over 48 + 2 · 2 · 8 channels, 4 wide; 48 x 8 SSM) twice, float32; two
  // attention layers' keys and values, 2 heads of 8, a token.
  EXPECT_EQ((*m)->StateBytesPerSequence(0), 2 * ((48 + 32) * 4 + 48 * 8) * 4);
  EXPECT_EQ((*m)->StateBytesPerSequence(10) - (*m)->StateBytesPerSequence(0),
            10 * 2 * 2 * 2 * 8 * 4);
}

TEST(LayerLayoutModelTest, ChunksStepsAndBatchedRowsEqualWholePass) {
  const v1::ModelConfig c = Layout();
  auto m = Model::Create("layout", c, Model::RandomWeights(c, 5));
  ASSERT_TRUE(m.ok()) << m.status();
  ExpectChunksStepsAndBatchedRowsEqualWholePass(**m, 80, 23, 8, 6, 1);
}

TEST(LayerLayoutModelTest, EveryPartChangesTheLogits) {
  const v1::ModelConfig c = Layout();
  const std::map<std::string, at::Tensor> weights = Model::RandomWeights(c, 7);
  const at::Tensor tokens = at::randint(0, 80, {1, 12}, at::kLong);
  const at::Tensor base =
      *(*Model::Create("layout", c, weights))->Forward(tokens, nullptr, OutputKind::kAllLogits);
  for (const char* part :
       {"backbone.layers.0.parallel_mixer.o_proj.weight", "backbone.layers.0.mixer.out_proj.weight",
        "backbone.layers.1.mlp.down_proj.weight",
        "backbone.layers.2.parallel_mixer.out_proj.weight",
        "backbone.layers.3.mlp.shared_expert.down_proj.weight"}) {
    std::map<std::string, at::Tensor> zeroed = weights;
    zeroed[part] = at::zeros_like(weights.at(part));
    auto m = Model::Create("layout", c, zeroed);
    ASSERT_TRUE(m.ok()) << m.status();
    const at::Tensor y = *(*m)->Forward(tokens, nullptr, OutputKind::kAllLogits);
    EXPECT_GT(testing::MaxRelativeError(y, base), 1e-3) << part;
  }
}

TEST(LayerLayoutModelTest, RefusalsNameTheField) {
  auto refused = [](const std::string& edit_from, const std::string& edit_to) {
    std::string json = kLayout;
    const size_t at = json.find(edit_from);
    EXPECT_NE(at, std::string::npos) << edit_from;
    json.replace(at, edit_from.size(), edit_to);
    auto c = ParseModelConfigJson(json);
    EXPECT_FALSE(c.ok()) << edit_to;
    return std::string(c.status().message());
  };
  EXPECT_NE(refused(R"("mlp_layers": [false, true, true, true])",
                    R"("mlp_layers": [false, false, true, true])")
                .find("layers[1] is none and has no MLP"),
            std::string::npos);
  EXPECT_NE(refused(R"("parallel_layers": ["standard", "", "mamba2", ""])",
                    R"("parallel_layers": ["standard", "mamba2", "", ""])")
                .find("parallel_layers[1]"),
            std::string::npos);
  EXPECT_NE(refused(R"("parallel_layers": ["standard", "", "mamba2", ""])",
                    R"("parallel_layers": ["standard"])")
                .find("parallel_layers has 1 entries"),
            std::string::npos);
  EXPECT_NE(refused(R"("parallel_layers": ["standard", "", "mamba2", ""])",
                    R"("parallel_layers": ["rwkv", "", "mamba2", ""])")
                .find("parallel_layers[0]"),
            std::string::npos);
  EXPECT_NE(refused(R"("ssm_norm": "norm_then_gate")", R"("ssm_norm": "after")").find("ssm_norm"),
            std::string::npos);
}

}  // namespace
}  // namespace attnserve::model

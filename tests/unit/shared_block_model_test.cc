// Zamba's shared attention + MLP block (server/model/shared_block.h) in attnserve's own config:
// multi-head Mamba layers, some of which run the shared block first. The config's refusals, the
// tensors (the block once, a shared_linear per using layer), the state's slots (a KV cache per
// using layer), chunks and steps = one whole pass, batched rows = each alone. (Transformers'
// Zamba: tests/integration/hf_golden_test.py.)
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "server/model/model.h"
#include "server/model/model_config.h"
#include "server/model/shared_block.h"
#include "tests/unit/model_test_util.h"
#include "tests/unit/test_util.h"

namespace attnserve::model {
namespace {

constexpr char kZambaLike[] = R"({"vocab_size": 96, "hidden_size": 32, "num_heads": 4,
  "num_key_value_heads": 2, "head_dim": 16, "attention_scale": 0.3535533905932738,
  "layers": ["mamba", "mamba", "mamba", "mamba"], "mamba_num_heads": 2,
  "shared_block_layers": [false, true, false, true], "intermediate_size": 48,
  "hidden_act": "gelu"})";

TEST(SharedBlockModelTest, ConfigTensorsAndRefusals) {
  auto c = ParseModelConfigJson(kZambaLike);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(UsesSharedBlock(*c));
  EXPECT_TRUE(LayerUsesSharedBlock(*c, 3));
  EXPECT_EQ(LayerMixerConfig(*c, 0).mamba_heads, 2);
  const kernels::MixerConfig attention = SharedBlock::AttentionConfig(*c);
  EXPECT_EQ(attention.d_model, 64);
  EXPECT_EQ(attention.output_dim(), 32);
  const std::vector<kernels::WeightSpec> specs = Model::ExpectedTensors(*c);
  auto count = [&](const std::string& part) {
    return std::count_if(specs.begin(), specs.end(), [&](const kernels::WeightSpec& s) {
      return s.name.find(part) != std::string::npos;
    });
  };
  EXPECT_EQ(count("backbone.shared.0.mixer.q_proj.weight"), 1);
  EXPECT_EQ(count("shared_linear.weight"), 2);
  EXPECT_EQ(count(".mlp.gate_proj"), 1);  // the block's only: the layers have no MLP
  EXPECT_EQ(count("x_proj_weight"), 4);
  for (const char* bad : {
           R"({"vocab_size": 9, "hidden_size": 8, "num_heads": 2, "layers": ["mamba"],
               "intermediate_size": 8, "shared_block_layers": [true, false]})",
           R"({"vocab_size": 9, "hidden_size": 8, "num_heads": 2, "layers": ["mamba"],
               "shared_block_layers": [true]})",
           R"({"vocab_size": 9, "hidden_size": 8, "num_heads": 3, "layers": ["mamba"],
               "intermediate_size": 8, "shared_block_layers": [true]})",
           R"({"vocab_size": 9, "hidden_size": 8, "layers": ["mamba"], "mamba_num_heads": 3})",
           R"({"vocab_size": 9, "hidden_size": 8, "layers": ["mamba"], "hidden_act": "relu"})"}) {
    EXPECT_FALSE(ParseModelConfigJson(bad).ok()) << bad;
  }
}

// A bfloat16 KV cache of the block's attention makes other states: the fingerprint says so,
// though no layer is a standard one.
TEST(SharedBlockModelTest, ABfloat16KvCacheChangesTheFingerprint) {
  auto c = ParseModelConfigJson(kZambaLike);
  ASSERT_TRUE(c.ok()) << c.status();
  ModelOptions bf16_kv;
  bf16_kv.kv_cache_dtype = at::kBFloat16;
  auto f32 = Model::Create("a", *c, Model::RandomWeights(*c, 3), {});
  auto bf16 = Model::Create("b", *c, Model::RandomWeights(*c, 3), bf16_kv);
  ASSERT_TRUE(f32.ok() && bf16.ok());
  EXPECT_NE((*f32)->fingerprint(), (*bf16)->fingerprint());
}

TEST(SharedBlockModelTest, ChunksStepsAndBatchedRowsEqualOneWholePass) {
  auto c = ParseModelConfigJson(kZambaLike);
  ASSERT_TRUE(c.ok()) << c.status();
  auto model = Model::Create("zamba_like", *c, Model::RandomWeights(*c, 3), {});
  ASSERT_TRUE(model.ok()) << model.status();
  const Model& m = **model;
  auto fresh = m.NewState();
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ(fresh->layers.size(), 6u);  // 4 layers, then the 2 using layers' KV caches
  // 4 Mamba states (64 channels x (4 + 16)) and 2 KV caches of 2 heads x 16 a token.
  EXPECT_EQ(m.StateBytesPerSequence(10), 4 * 64 * 20 * 4 + 10 * 2 * 2 * 2 * 16 * 4);
  ExpectChunksStepsAndBatchedRowsEqualWholePass(m, 96, 26, 9, 6, 1);
}

// Zamba2's form: Mamba-2 layers, two blocks used in turn by three layers (the first and third
// run block 0), rotary positions in the blocks' attention, each using layer's own adapters.
constexpr char kZamba2Like[] = R"({"vocab_size": 96, "hidden_size": 32, "num_heads": 4,
  "num_key_value_heads": 4, "head_dim": 16, "attention_scale": 0.3535533905932738,
  "rope_theta": 10000, "layers": ["mamba2", "mamba2", "mamba2", "mamba2", "mamba2"],
  "ssm_num_heads": 4, "ssm_n_groups": 2, "ssm_chunk_size": 8, "state_size": 8,
  "shared_block_layers": [true, false, true, true, false], "num_shared_blocks": 2,
  "shared_attention_adapter_rank": 4, "shared_mlp_adapter_rank": 5,
  "intermediate_size": 48, "hidden_act": "gelu"})";

TEST(SharedBlockModelTest, TwoBlocksWithAdaptersTensorsAndRefusals) {
  auto c = ParseModelConfigJson(kZamba2Like);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(SharedBlockCount(*c), 2);
  const std::vector<kernels::WeightSpec> specs = Model::ExpectedTensors(*c);
  auto shape = [&](const std::string& name) {
    for (const kernels::WeightSpec& s : specs) {
      if (s.name == name) return s.shape;
    }
    return std::vector<int64_t>{};
  };
  EXPECT_EQ(shape("backbone.shared.1.mixer.q_proj.weight"), (std::vector<int64_t>{64, 64}));
  EXPECT_TRUE(shape("backbone.shared.2.mixer.q_proj.weight").empty());
  EXPECT_EQ(shape("backbone.layers.2.shared_adapter.k_proj.down.weight"),
            (std::vector<int64_t>{4, 64}));
  EXPECT_EQ(shape("backbone.layers.2.shared_adapter.k_proj.up.weight"),
            (std::vector<int64_t>{64, 4}));
  EXPECT_EQ(shape("backbone.layers.3.shared_adapter.gate_up_proj.up.weight"),
            (std::vector<int64_t>{96, 5}));
  EXPECT_TRUE(shape("backbone.layers.1.shared_adapter.gate_up_proj.up.weight").empty());
  for (const char* bad : {R"({"vocab_size": 9, "hidden_size": 8, "layers": ["mamba"],
                              "num_shared_blocks": 2})",
                          R"({"vocab_size": 9, "hidden_size": 8, "num_heads": 2,
                              "layers": ["mamba"], "intermediate_size": 8,
                              "shared_block_layers": [true], "shared_mlp_adapter_rank": -1})"}) {
    EXPECT_FALSE(ParseModelConfigJson(bad).ok()) << bad;
  }
}

TEST(SharedBlockModelTest, TwoBlocksWithAdaptersChunksStepsAndBatchedRows) {
  auto c = ParseModelConfigJson(kZamba2Like);
  ASSERT_TRUE(c.ok()) << c.status();
  const std::map<std::string, at::Tensor> weights = Model::RandomWeights(*c, 5);
  auto model = Model::Create("zamba2_like", *c, weights, {});
  ASSERT_TRUE(model.ok()) << model.status();
  const Model& m = **model;
  const at::Tensor tokens = at::randint(0, 96, {3, 24}, at::kLong);
  const at::Tensor whole = *m.Forward(tokens, nullptr, OutputKind::kAllLogits);
  // Every adapter and both blocks take part: changing any one changes the logits.
  for (const char* name :
       {"backbone.layers.3.shared_adapter.q_proj.up.weight",
        "backbone.layers.2.shared_adapter.v_proj.down.weight",
        "backbone.layers.0.shared_adapter.gate_up_proj.up.weight",
        "backbone.shared.1.mixer.k_proj.weight", "backbone.shared.0.mlp.up_proj.weight"}) {
    std::map<std::string, at::Tensor> changed = weights;
    changed[name] = changed[name] * 0.5;
    auto other = Model::Create("changed", *c, changed, {});
    ASSERT_TRUE(other.ok()) << other.status();
    EXPECT_GT(testing::MaxRelativeError(*(*other)->Forward(tokens, nullptr, OutputKind::kAllLogits),
                                        whole),
              1e-3)
        << name;
  }
  ExpectChunksStepsAndBatchedRowsEqualWholePass(m, 96, 24, 11, 6, 2);
}

}  // namespace
}  // namespace attnserve::model

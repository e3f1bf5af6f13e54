// mamba2 layers in attnserve's own config format, beside attention layers (a hybrid), through
// the whole model: the config's defaults and refusals, chunks and steps = one whole pass, the
// state's size. (Batched steps: the mixer contract suite and hf_golden_test.py's 16 sessions.)
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "server/model/model.h"
#include "server/model/model_config.h"
#include "tests/unit/test_util.h"

namespace attnserve::model {
namespace {

constexpr char kHybrid[] = R"({"vocab_size": 96, "hidden_size": 64, "num_heads": 4,
  "layers": ["mamba2", "standard", "mamba2"], "intermediate_size": 128, "state_size": 32,
  "ssm_n_groups": 2, "ssm_chunk_size": 16, "time_step_limit": [0.0, "Infinity"]})";

absl::StatusOr<std::unique_ptr<Model>> HybridModel() {
  absl::StatusOr<v1::ModelConfig> config = ParseModelConfigJson(kHybrid);
  if (!config.ok()) return config.status();
  return Model::Create("hybrid2", *config, Model::RandomWeights(*config, 7), {});
}

TEST(Mamba2ModelTest, OwnConfigFillsTheDefaults) {
  auto config = ParseModelConfigJson(kHybrid);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->ssm_num_heads(), 2);  // 128 channels / 64
  EXPECT_EQ(config->ssm_n_groups(), 2);
  const kernels::MixerConfig m = LayerMixerConfig(*config, 0);
  EXPECT_EQ(m.kind, kernels::MixerKind::kMamba2);
  EXPECT_EQ(m.ssm_head_dim(), 64);
  EXPECT_TRUE(std::isinf(m.dt_max));
  auto bad = ParseModelConfigJson(R"({"vocab_size": 96, "hidden_size": 64,
      "layers": ["mamba2"], "ssm_num_heads": 3})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("multiple of ssm_heads"), std::string::npos)
      << bad.status();
  bad = ParseModelConfigJson(R"({"vocab_size": 96, "hidden_size": 64, "layers": ["mamba2"],
      "time_step_limit": [0.1]})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("time_step_limit"), std::string::npos);
}

TEST(Mamba2ModelTest, HybridChunksAndStepsEqualOneWholePass) {
  auto model = HybridModel();
  ASSERT_TRUE(model.ok()) << model.status();
  const Model& m = **model;
  const at::Tensor tokens = at::randint(0, 96, {1, 50}, at::kLong);
  const at::Tensor whole = *m.Forward(tokens, nullptr, OutputKind::kAllLogits);
  auto state = m.NewState();
  ASSERT_TRUE(state.ok());
  std::vector<at::Tensor> parts = {
      *m.Forward(tokens.narrow(1, 0, 21), &*state, OutputKind::kAllLogits),
      *m.Forward(tokens.narrow(1, 21, 19), &*state, OutputKind::kAllLogits)};
  for (int64_t t = 40; t < 50; ++t) {
    parts.push_back(*m.Forward(tokens.narrow(1, t, 1), &*state, OutputKind::kAllLogits));
  }
  EXPECT_LE(testing::MaxRelativeError(at::cat(parts, 1), whole), 1e-5);
  // Two mamba2 layers' fixed states (conv 256 x 4, ssm 2 x 64 x 32 floats each) and the
  // attention layer's KV cache of 50 positions (k and v, 64 floats each; spare capacity too).
  EXPECT_GE(state->Bytes(), 2 * (256 * 4 + 2 * 64 * 32) * 4 + 50 * 2 * 64 * 4);
}

}  // namespace
}  // namespace attnserve::model

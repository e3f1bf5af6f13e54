// The Mamba-2 mixer (chunked SSD scan, decode step, gated norm) against the float64
// reference of kernels/mamba2/mamba2_reference.h, on random shapes, and its error cases. The
// streaming contract (chunks, steps, batches) is mixer_contract_test.cc's.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernels/common/mixer.h"
#include "kernels/mamba2/mamba2_reference.h"
#include "tests/unit/test_util.h"

namespace attnserve::kernels {
namespace {

struct Mamba2Shape {
  int64_t batch, len, d_model, heads, groups, d_state, chunk;
  int64_t d_conv = 4;
  int64_t inner = 0;  // d_inner; 0: expand · d_model
  MixerConfig::SsmNorm norm = MixerConfig::SsmNorm::kGateThenNorm;
};

MixerConfig Mamba2Config(const Mamba2Shape& s) {
  MixerConfig c;
  c.kind = MixerKind::kMamba2;
  c.d_model = s.d_model;
  c.ssm_heads = s.heads;
  c.ssm_groups = s.groups;
  c.d_state = s.d_state;
  c.ssm_chunk_size = s.chunk;
  c.d_conv = s.d_conv;
  c.inner_dim = s.inner;
  c.ssm_norm = s.norm;
  return c;
}

class Mamba2ReferenceTest : public ::testing::TestWithParam<Mamba2Shape> {};

TEST_P(Mamba2ReferenceTest, WholeSequenceAndStepsMatchFloat64Reference) {
  const Mamba2Shape s = GetParam();
  const MixerConfig c = Mamba2Config(s);
  WeightMap w = RandomWeights(c, 5 + s.len);
  auto mixer = CreateMixer(c, w);
  ASSERT_TRUE(mixer.ok()) << mixer.status();
  at::Tensor x = testing::RandomTensor({s.batch, s.len, s.d_model}, 9 + s.len);
  const at::Tensor want = mamba2::Mamba2Reference(c, w, x);
  auto y = (*mixer)->Prefill(x, nullptr);
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_EQ(y->sizes(), x.sizes());
  EXPECT_LE(testing::MaxRelativeError(*y, want), 2e-5);

  // The decode step's own path, token by token.
  auto state = (*mixer)->InitialState(s.batch);
  ASSERT_TRUE(state.ok());
  std::vector<at::Tensor> steps;
  for (int64_t t = 0; t < std::min<int64_t>(s.len, 40); ++t) {
    auto y_t = (*mixer)->Step(x.select(1, t), &*state);
    ASSERT_TRUE(y_t.ok()) << y_t.status();
    steps.push_back(y_t->unsqueeze(1));
  }
  EXPECT_LE(testing::MaxRelativeError(at::cat(steps, 1), want.narrow(1, 0, steps.size())), 2e-5);
}

// head_dim 32 to 128, d_state 16 to 256, one to eight groups, chunks of 1 (every token its own
// chunk), shorter than, equal to and longer than the sequence, sequences ending mid-chunk.
INSTANTIATE_TEST_SUITE_P(
    Shapes, Mamba2ReferenceTest,
    ::testing::Values(
        Mamba2Shape{1, 37, 64, 4, 1, 16, 8}, Mamba2Shape{2, 50, 64, 2, 2, 64, 16},
        Mamba2Shape{1, 33, 128, 2, 1, 128, 256}, Mamba2Shape{1, 70, 64, 1, 1, 256, 32},
        Mamba2Shape{2, 45, 128, 8, 8, 32, 13}, Mamba2Shape{1, 9, 48, 3, 1, 16, 1},
        Mamba2Shape{3, 64, 96, 6, 3, 48, 64}, Mamba2Shape{1, 130, 64, 4, 2, 16, 64, 3},
        // Falcon-H1's and Nemotron-H's: d_inner not 2 · d_model, the norm before
        // the gate, or no norm at all.
        Mamba2Shape{2, 41, 64, 6, 2, 16, 16, 4, 96}, Mamba2Shape{1, 35, 32, 8, 4, 16, 8, 4, 256},
        Mamba2Shape{2, 29, 64, 4, 2, 16, 8, 4, 0, MixerConfig::SsmNorm::kNormThenGate},
        Mamba2Shape{1, 30, 64, 6, 1, 16, 16, 4, 96, MixerConfig::SsmNorm::kGateOnly}));

TEST(Mamba2Test, WithoutNormHasNoNormWeight) {
  Mamba2Shape s{1, 1, 64, 4, 1, 16, 8};
  s.norm = MixerConfig::SsmNorm::kGateOnly;
  for (const WeightSpec& spec : ExpectedWeights(Mamba2Config(s))) {
    EXPECT_NE(spec.name, "norm.weight");
  }
}

TEST(Mamba2Test, TimeStepLimitClampsDt) {
  Mamba2Shape s{1, 30, 32, 4, 1, 16, 8};
  MixerConfig c = Mamba2Config(s);
  c.dt_min = 0.01;
  c.dt_max = 0.05;
  WeightMap w = RandomWeights(c, 3);
  // Biases from far below to far above the limits, so that both bounds clamp.
  w["dt_bias"] = at::tensor({-12.0f, -2.0f, 0.5f, 30.0f});
  auto mixer = CreateMixer(c, w);
  ASSERT_TRUE(mixer.ok());
  at::Tensor x = testing::RandomTensor({1, 30, 32}, 4);
  auto y = (*mixer)->Prefill(x, nullptr);
  ASSERT_TRUE(y.ok());
  const at::Tensor want = mamba2::Mamba2Reference(c, w, x);
  EXPECT_LE(testing::MaxRelativeError(*y, want), 2e-5);
  MixerConfig unclamped = c;
  unclamped.dt_min = 0;
  unclamped.dt_max = std::numeric_limits<double>::infinity();
  EXPECT_GT(testing::MaxRelativeError(*y, mamba2::Mamba2Reference(unclamped, w, x)), 1e-3);
}

TEST(Mamba2Test, StateIsHuggingFacesMamba2CacheLayoutAndSize) {
  MixerConfig c = Mamba2Config({1, 1, 64, 4, 2, 16, 8});
  auto mixer = CreateMixer(c, RandomWeights(c, 1));
  ASSERT_TRUE(mixer.ok());
  auto state = (*mixer)->InitialState(3);
  ASSERT_TRUE(state.ok());
  const int64_t conv_dim = 128 + 2 * 2 * 16;
  EXPECT_EQ(state->tensors[0].sizes(), at::IntArrayRef({3, conv_dim, 4}));
  EXPECT_EQ(state->tensors[1].sizes(), at::IntArrayRef({3, 4, 32, 16}));
  EXPECT_EQ((*mixer)->StateBytesPerSequence(1000), (conv_dim * 4 + 128 * 16) * 4);
}

TEST(Mamba2Test, WeightsHaveHuggingFaceNamesAndShapes) {
  MixerConfig c = Mamba2Config({1, 1, 64, 8, 2, 16, 8});
  std::map<std::string, std::vector<int64_t>> want = {{"in_proj.weight", {128 + 128 + 64 + 8, 64}},
                                                      {"conv1d.weight", {192, 1, 4}},
                                                      {"conv1d.bias", {192}},
                                                      {"dt_bias", {8}},
                                                      {"A_log", {8}},
                                                      {"D", {8}},
                                                      {"norm.weight", {128}},
                                                      {"out_proj.weight", {64, 128}}};
  std::map<std::string, std::vector<int64_t>> got;
  for (const WeightSpec& spec : ExpectedWeights(c)) got[spec.name] = spec.shape;
  EXPECT_EQ(got, want);
}

TEST(Mamba2Test, RejectsBadConfigsAndInputsWithMessages) {
  MixerConfig c = Mamba2Config({1, 1, 64, 6, 1, 16, 8});  // 128 channels in 6 heads
  EXPECT_NE(ValidateMixerConfig(c).message().find("multiple of ssm_heads"), std::string::npos)
      << ValidateMixerConfig(c);
  c = Mamba2Config({1, 1, 64, 8, 3, 16, 8});
  EXPECT_NE(ValidateMixerConfig(c).message().find("multiple of ssm_groups"), std::string::npos);
  c = Mamba2Config({1, 1, 64, 8, 1, 16, 0});
  EXPECT_NE(ValidateMixerConfig(c).message().find("ssm_chunk_size"), std::string::npos);
  c = Mamba2Config({1, 1, 64, 8, 1, 16, 8});
  c.dt_min = 0.5;
  c.dt_max = 0.1;
  EXPECT_NE(ValidateMixerConfig(c).message().find("time_step_limit"), std::string::npos);

  c = Mamba2Config({1, 1, 64, 8, 1, 16, 8});
  auto mixer = CreateMixer(c, RandomWeights(c, 2));
  ASSERT_TRUE(mixer.ok());
  EXPECT_FALSE((*mixer)->Prefill(at::zeros({1, 0, 64}), nullptr).ok());
  EXPECT_FALSE((*mixer)->Prefill(at::zeros({1, 3, 63}), nullptr).ok());
  auto state = (*mixer)->InitialState(1);
  ASSERT_TRUE(state.ok());
  state->tensors[1] = at::zeros({1, 8, 16, 8});
  auto bad = (*mixer)->Step(at::zeros({1, 64}), &*state);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("ssm_state"), std::string::npos) << bad.status();

  WeightMap w = RandomWeights(c, 2);
  w.erase("dt_bias");
  auto missing = CreateMixer(c, w);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("dt_bias"), std::string::npos);
}

}  // namespace
}  // namespace attnserve::kernels

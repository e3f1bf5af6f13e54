// The fused Mamba mixer against the float64 reference, and its error cases.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "kernels/common/mixer.h"
#include "kernels/mamba/mamba_reference.h"
#include "tests/unit/test_util.h"

namespace attnserve::kernels {
namespace {

MixerConfig MambaConfig(int64_t d_model, int64_t d_state, int64_t d_conv = 4) {
  MixerConfig c;
  c.kind = MixerKind::kMamba;
  c.d_model = d_model;
  c.d_state = d_state;
  c.d_conv = d_conv;
  return c;
}

struct MambaShape {
  int64_t batch, len, d_model, d_state, d_conv;
  double bcdt_rms_epsilon = 0;     // > 0: Falcon-Mamba's norms of dt, B and C
  bool bcdt_norm_weights = false;  // Jamba's: those norms with weights
  int64_t heads = 1;               // Zamba's multi-head Mamba
};

class MambaReferenceTest : public ::testing::TestWithParam<MambaShape> {};

TEST_P(MambaReferenceTest, MatchesFloat64Reference) {
  const MambaShape s = GetParam();
  MixerConfig c = MambaConfig(s.d_model, s.d_state, s.d_conv);
  c.bcdt_rms_epsilon = s.bcdt_rms_epsilon;
  c.bcdt_norm_weights = s.bcdt_norm_weights;
  c.mamba_heads = s.heads;
  WeightMap w = RandomWeights(c, 7 + s.len);
  auto mixer = CreateMixer(c, w);
  ASSERT_TRUE(mixer.ok()) << mixer.status();
  at::Tensor x = testing::RandomTensor({s.batch, s.len, s.d_model}, 11 + s.len);
  auto y = (*mixer)->Prefill(x, nullptr);
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_EQ(y->sizes(), x.sizes());
  at::Tensor want = mamba::MambaReference(c, w, x);
  EXPECT_LE(testing::MaxRelativeError(*y, want), 1e-5);
}

// d_model 40 gives d_inner 80: five full vector blocks; 24 gives 48 (three); 20 gives 40, a
// partial block of 8 channels. L = 1 (the conv's width-4 step path, with and without a partial
// block), L below and above the 64-row conv block.
INSTANTIATE_TEST_SUITE_P(
    Shapes, MambaReferenceTest,
    ::testing::Values(MambaShape{1, 1, 32, 16, 4}, MambaShape{3, 1, 20, 16, 4},
                      MambaShape{2, 7, 20, 16, 4}, MambaShape{1, 63, 40, 16, 4},
                      MambaShape{2, 65, 24, 8, 3}, MambaShape{1, 200, 64, 16, 4},
                      MambaShape{1, 130, 256, 16, 4}, MambaShape{2, 70, 40, 16, 4, 1e-6},
                      MambaShape{1, 1, 24, 8, 3, 1e-3}, MambaShape{2, 45, 40, 16, 4, 1e-6, true},
                      MambaShape{1, 1, 20, 8, 4, 1e-5, true},
                      // Zamba: 2 heads of 40 (a partial block of 8 channels each), 4 of 16.
                      MambaShape{2, 37, 40, 16, 4, 0, false, 2},
                      MambaShape{1, 1, 32, 16, 4, 0, false, 4},
                      MambaShape{1, 70, 32, 8, 4, 0, false, 4}));

TEST(MambaTest, ReferenceMatchesAWideRangeOfStepSizes) {
  // Large dt_proj bias: dt·A far below -87 exercises the clamped exp (exp underflows to 0).
  MixerConfig c = MambaConfig(16, 16);
  WeightMap w = RandomWeights(c, 3);
  w["dt_proj.bias"] = at::linspace(-8.0, 120.0, c.d_inner());
  auto mixer = CreateMixer(c, w);
  ASSERT_TRUE(mixer.ok());
  at::Tensor x = testing::RandomTensor({1, 40, 16}, 5);
  auto y = (*mixer)->Prefill(x, nullptr);
  ASSERT_TRUE(y.ok());
  EXPECT_LE(testing::MaxRelativeError(*y, mamba::MambaReference(c, w, x)), 1e-5);
}

TEST(MambaTest, WeightsHaveHuggingFaceNamesAndShapes) {
  MixerConfig c = MambaConfig(768, 16);  // mamba-130m
  std::map<std::string, std::vector<int64_t>> want = {
      {"in_proj.weight", {3072, 768}}, {"conv1d.weight", {1536, 1, 4}},
      {"conv1d.bias", {1536}},         {"x_proj.weight", {80, 1536}},
      {"dt_proj.weight", {1536, 48}},  {"dt_proj.bias", {1536}},
      {"A_log", {1536, 16}},           {"D", {1536}},
      {"out_proj.weight", {768, 1536}}};
  auto specs = ExpectedWeights(c);
  ASSERT_EQ(specs.size(), want.size());
  for (const WeightSpec& spec : specs) EXPECT_EQ(spec.shape, want.at(spec.name)) << spec.name;
  auto mixer = CreateMixer(c, RandomWeights(c, 1));
  ASSERT_TRUE(mixer.ok());
  EXPECT_EQ((*mixer)->StateBytesPerSequence(100000), 1536 * (4 + 16) * 4);
}

TEST(MambaTest, RejectsBadInputWithMessages) {
  MixerConfig c = MambaConfig(32, 16);
  auto mixer = CreateMixer(c, RandomWeights(c, 1));
  ASSERT_TRUE(mixer.ok());
  const Mixer& m = **mixer;

  auto wrong_width = m.Prefill(at::zeros({1, 4, 16}), nullptr);
  EXPECT_EQ(wrong_width.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(wrong_width.status().message().find("expected float32 cpu tensor of shape (?, ?, 32), "
                                                "got float32 cpu (1, 4, 16)"),
            std::string::npos)
      << wrong_width.status();

  auto wrong_dtype = m.Prefill(at::zeros({1, 4, 32}, at::kDouble), nullptr);
  EXPECT_NE(wrong_dtype.status().message().find("got float64"), std::string::npos)
      << wrong_dtype.status();

  EXPECT_EQ(m.Prefill(at::zeros({1, 0, 32}), nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.Prefill(at::zeros({4, 32}), nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);

  auto state = m.InitialState(2);
  ASSERT_TRUE(state.ok());
  auto batch_mismatch = m.Prefill(at::zeros({3, 4, 32}), &*state);
  EXPECT_NE(batch_mismatch.status().message().find("mamba conv_state"), std::string::npos)
      << batch_mismatch.status();
  EXPECT_EQ(m.Step(at::zeros({2, 32}), nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.InitialState(0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(MambaTest, CreateMixerNamesTheMissingOrMisshapenTensor) {
  MixerConfig c = MambaConfig(32, 16);
  WeightMap missing = RandomWeights(c, 1);
  missing.erase("A_log");
  auto m1 = CreateMixer(c, missing);
  EXPECT_NE(m1.status().message().find("missing tensor 'A_log' of shape (64, 16)"),
            std::string::npos)
      << m1.status();

  WeightMap misshapen = RandomWeights(c, 1);
  misshapen["x_proj.weight"] = at::zeros({35, 64});
  auto m2 = CreateMixer(c, misshapen);
  EXPECT_NE(m2.status().message().find("'x_proj.weight' expected float32 (34, 64), got float32 "
                                       "(35, 64)"),
            std::string::npos)
      << m2.status();

  WeightMap extra = RandomWeights(c, 1);
  extra["bogus"] = at::zeros({1});
  EXPECT_NE(CreateMixer(c, extra).status().message().find("unexpected tensor 'bogus'"),
            std::string::npos);

  MixerConfig bad = c;
  bad.d_state = 0;
  EXPECT_NE(CreateMixer(bad, {}).status().message().find("d_state must be > 0, got 0"),
            std::string::npos);
}

}  // namespace
}  // namespace attnserve::kernels

// LFM2's gated short convolution (kernels/short_conv/) against its float64 reference on random
// shapes, whole sequences and step by step; its state's layout and refusals. The streaming
// contract (chunks, steps, batches) is mixer_contract_test.cc's.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "kernels/common/mixer.h"
#include "kernels/short_conv/short_conv_reference.h"
#include "tests/unit/test_util.h"

namespace attnserve::kernels {
namespace {

struct ShortConvShape {
  int64_t batch, len, d_model, width;
  bool bias;
};

MixerConfig ShortConvConfig(const ShortConvShape& s) {
  MixerConfig c;
  c.kind = MixerKind::kShortConv;
  c.d_model = s.d_model;
  c.d_conv = s.width;
  c.conv_bias = s.bias;
  return c;
}

class ShortConvReferenceTest : public ::testing::TestWithParam<ShortConvShape> {};

TEST_P(ShortConvReferenceTest, WholeSequenceAndStepsMatchFloat64Reference) {
  const ShortConvShape s = GetParam();
  const MixerConfig c = ShortConvConfig(s);
  const WeightMap w = RandomWeights(c, 11 + s.len);
  auto mixer = CreateMixer(c, w);
  ASSERT_TRUE(mixer.ok()) << mixer.status();
  const at::Tensor x = testing::RandomTensor({s.batch, s.len, s.d_model}, 3 + s.width);
  const at::Tensor want = short_conv::ShortConvReference(c, w, x);
  auto y = (*mixer)->Prefill(x, nullptr);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_LE(testing::MaxRelativeError(*y, want), 1e-5);
  auto state = (*mixer)->InitialState(s.batch);
  ASSERT_TRUE(state.ok());
  std::vector<at::Tensor> steps;
  for (int64_t t = 0; t < s.len; ++t) {
    auto y_t = (*mixer)->Step(x.select(1, t), &*state);
    ASSERT_TRUE(y_t.ok()) << y_t.status();
    steps.push_back(y_t->unsqueeze(1));
  }
  EXPECT_LE(testing::MaxRelativeError(at::cat(steps, 1), want), 1e-5);
}

// LFM2's width 3, the conv kernel's width-4 decode path, wider kernels; widths that are and are
// not multiples of 16; sequences shorter than the kernel.
INSTANTIATE_TEST_SUITE_P(
    Shapes, ShortConvReferenceTest,
    ::testing::Values(ShortConvShape{1, 29, 64, 3, false}, ShortConvShape{2, 33, 48, 3, true},
                      ShortConvShape{1, 17, 37, 4, false}, ShortConvShape{3, 21, 64, 4, true},
                      ShortConvShape{1, 2, 32, 5, false}, ShortConvShape{2, 40, 80, 7, true}));

TEST(ShortConvTest, StateIsTheLastInputsOfTheConvolution) {
  const MixerConfig c = ShortConvConfig({1, 1, 32, 3, false});
  auto mixer = CreateMixer(c, RandomWeights(c, 1));
  ASSERT_TRUE(mixer.ok());
  auto state = (*mixer)->InitialState(2);
  ASSERT_TRUE(state.ok());
  ASSERT_EQ(state->tensors.size(), 1u);
  EXPECT_EQ(state->tensors[0].sizes(), at::IntArrayRef({2, 32, 3}));
  EXPECT_EQ((*mixer)->StateBytesPerSequence(1000), 32 * 3 * 4);
  EXPECT_EQ((*mixer)->StepKeysRead(1000), 0);
  std::vector<std::string> names;
  for (const WeightSpec& spec : ExpectedWeights(c)) names.push_back(spec.name);
  EXPECT_EQ(names, (std::vector<std::string>{"in_proj.weight", "conv.weight", "out_proj.weight"}));
  MixerConfig bad = c;
  bad.d_conv = 0;
  EXPECT_NE(ValidateMixerConfig(bad).message().find("d_conv"), std::string::npos);
}

}  // namespace
}  // namespace attnserve::kernels

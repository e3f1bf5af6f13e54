// The performer mixer (kernels/performer/): FAVOR+ features on the linear mixer's machinery,
// against a float64 reference from the formulas (causal and bidirectional), its random
// features drawn once from the config's seed (orthogonal, the same on every load), and an
// unbiased estimate of softmax attention's kernel. (Chunks, steps, StepBatch:
// mixer_contract_test.cc.)
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernels/performer/performer_attention.h"
#include "kernels/performer/performer_reference.h"
#include "tests/unit/test_util.h"

namespace attnserve::kernels {
namespace {

MixerConfig Config(int64_t d_model, int64_t heads, bool causal, uint64_t seed) {
  MixerConfig c;
  c.kind = MixerKind::kPerformer;
  c.d_model = d_model;
  c.num_heads = heads;
  c.causal = causal;
  c.performer_seed = seed;
  return c;
}

TEST(PerformerTest, MatchesTheFloat64ReferenceCausalAndBidirectional) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 6; ++trial) {
    const int64_t heads = 1 + rng() % 4, d_model = heads * 8 * (1 + rng() % 4);
    const int64_t len = 1 + rng() % 150;
    for (bool causal : {true, false}) {
      const MixerConfig config = Config(d_model, heads, causal, 100 + trial);
      const WeightMap weights = RandomWeights(config, trial);
      auto mixer = CreateMixer(config, weights);
      ASSERT_TRUE(mixer.ok()) << mixer.status();
      const at::Tensor x = testing::RandomTensor({2, len, d_model}, trial + 9);
      auto got = (*mixer)->Prefill(x, nullptr);
      ASSERT_TRUE(got.ok()) << got.status();
      auto want = PerformerAttentionReference(config, weights, x);
      ASSERT_TRUE(want.ok()) << want.status();
      EXPECT_LE(testing::MaxRelativeError(*got, *want), 1e-4)
          << "causal " << causal << " L " << len << " d " << d_model / heads;
    }
  }
}

TEST(PerformerTest, FeaturesAreOrthogonalDrawnOnceFromTheSeedAndLayersDiffer) {
  const MixerConfig config = Config(64, 2, true, 7);
  const at::Tensor omega = PerformerFeatureMatrix(config);
  ASSERT_EQ(omega.sizes(), at::IntArrayRef({32, 32}));
  const at::Tensor gram = at::matmul(omega.to(at::kDouble), omega.to(at::kDouble).t());
  const at::Tensor off_diagonal = gram - at::diag_embed(at::diagonal(gram));
  EXPECT_LT(off_diagonal.abs().max().item<double>(), 1e-3 * gram.diagonal().max().item<double>());
  EXPECT_TRUE(at::equal(omega, PerformerFeatureMatrix(config))) << "the same seed, the same ω";
  EXPECT_FALSE(at::equal(omega, PerformerFeatureMatrix(Config(64, 2, true, 8))));
  // Two mixers with the same seed and weights (a reload, another replica) agree exactly.
  const WeightMap weights = RandomWeights(config, 1);
  auto a = CreateMixer(config, weights), b = CreateMixer(config, weights);
  const at::Tensor x = testing::RandomTensor({1, 30, 64}, 2);
  EXPECT_TRUE(at::equal(*(*a)->Prefill(x, nullptr), *(*b)->Prefill(x, nullptr)));
}

TEST(PerformerTest, FeatureProductsEstimateTheSoftmaxKernel) {
  // E[φ(q)·φ(k)] = exp(q·k / √d) over ω: the mean over many seeds approaches it.
  const int64_t d = 16;
  const at::Tensor q = testing::RandomTensor({d}, 1, 0.5).to(at::kDouble);
  const at::Tensor k = testing::RandomTensor({d}, 2, 0.5).to(at::kDouble);
  const double exact = std::exp((q * k).sum().item<double>() / std::sqrt(static_cast<double>(d)));
  double mean = 0;
  const int draws = 400;
  for (int seed = 0; seed < draws; ++seed) {
    const at::Tensor omega = PerformerFeatureMatrix(Config(d, 1, true, seed)).to(at::kDouble);
    mean += (FavorPlusFeatures(q, omega) * FavorPlusFeatures(k, omega)).sum().item<double>();
  }
  mean /= draws;
  EXPECT_NEAR(mean / exact, 1.0, 0.05) << "mean " << mean << " exact " << exact;
}

TEST(PerformerTest, BidirectionalCannotStreamAndStateIsFixed) {
  auto bidirectional =
      CreateMixer(Config(32, 2, false, 1), RandomWeights(Config(32, 2, false, 1), 1));
  EXPECT_EQ((*bidirectional)->InitialState(1).status().code(),
            absl::StatusCode::kFailedPrecondition);
  auto causal = CreateMixer(Config(32, 2, true, 1), RandomWeights(Config(32, 2, true, 1), 1));
  EXPECT_EQ((*causal)->StateBytesPerSequence(1), (*causal)->StateBytesPerSequence(1 << 20));
}

}  // namespace
}  // namespace attnserve::kernels

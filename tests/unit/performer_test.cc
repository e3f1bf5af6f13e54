// The performer mixer (kernels/performer/): FAVOR+ features on the linear mixer's machinery,
// against exact FAVOR+ in float64 from the formulas (causal and bidirectional; keys opposite
// to the queries, whose normaliser is tiny; a single token, which must come back as its value,
// by every path), its random features drawn once from the config's seed (orthogonal, the same
// on every load), and an unbiased estimate of softmax attention's kernel. (Chunks, steps,
// StepBatch: mixer_contract_test.cc.)
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>
#include <vector>

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

// The mixer's output over x (B, L, D) by every path: one prefill with no state, prefills of
// chunks of 7 tokens continuing a state, steps from a fresh state, and StepBatch of the B rows
// (one state each).
std::vector<std::pair<const char*, at::Tensor>> EveryPath(const Mixer& mixer, const at::Tensor& x) {
  const int64_t b = x.size(0), len = x.size(1);
  std::vector<std::pair<const char*, at::Tensor>> out;
  out.emplace_back("prefill", *mixer.Prefill(x, nullptr));
  MixerState chunked = *mixer.InitialState(b), stepped = *mixer.InitialState(b);
  std::vector<at::Tensor> chunks, steps, batched;
  for (int64_t pos = 0; pos < len; pos += 7) {
    chunks.push_back(*mixer.Prefill(x.narrow(1, pos, std::min<int64_t>(7, len - pos)), &chunked));
  }
  std::vector<MixerState> rows;
  for (int64_t i = 0; i < b; ++i) rows.push_back(*mixer.InitialState(1));
  std::vector<MixerState*> row_states;
  for (MixerState& s : rows) row_states.push_back(&s);
  for (int64_t t = 0; t < len; ++t) {
    steps.push_back(mixer.Step(x.select(1, t), &stepped)->unsqueeze(1));
    batched.push_back(mixer.StepBatch(x.select(1, t), row_states)->unsqueeze(1));
  }
  out.emplace_back("chunks", at::cat(chunks, 1));
  out.emplace_back("steps", at::cat(steps, 1));
  out.emplace_back("StepBatch", at::cat(batched, 1));
  return out;
}

// Keys opposite to the queries (k_proj = −q_proj), head_dim 64: φ(q_t)·φ(k_t) = e^{−|q̂_t|²}
// is tiny, and the first token's normaliser is nothing else. An absolute ε added to it (right
// for elu + 1 features, which are >= e^{x} with x of order 1) pulls the output towards 0; the
// exact FAVOR+ output of the first token is its own value.
TEST(PerformerTest, KeysOppositeToTheQueriesMatchExactFavorPlus) {
  for (double scale : {1.0, 1.5, 2.0}) {  // |q| about 8, 12, 16
    for (bool causal : {true, false}) {
      const MixerConfig config = Config(128, 2, causal, 5);
      WeightMap weights = RandomWeights(config, 3);
      weights["q_proj.weight"] = testing::RandomTensor({128, 128}, 4, scale / std::sqrt(128.0));
      weights["k_proj.weight"] = -weights["q_proj.weight"];
      auto mixer = CreateMixer(config, weights);
      ASSERT_TRUE(mixer.ok()) << mixer.status();
      const at::Tensor x = testing::RandomTensor({2, 24, 128}, 6);
      auto want = PerformerAttentionReference(config, weights, x);
      ASSERT_TRUE(want.ok()) << want.status();
      if (!causal) {
        EXPECT_LE(testing::MaxRelativeError(*(*mixer)->Prefill(x, nullptr), *want), 1e-5)
            << "bidirectional, scale " << scale;
        continue;
      }
      for (const auto& [path, got] : EveryPath(**mixer, x)) {
        EXPECT_LE(testing::MaxRelativeError(got, *want), 1e-5) << path << ", scale " << scale;
        EXPECT_LE(testing::MaxRelativeError(got.narrow(1, 0, 1), want->narrow(1, 0, 1)), 1e-5)
            << path << ", scale " << scale << ", the first token";
      }
    }
  }
}

// One token attends to itself alone: whatever its normaliser, the output is o_proj(v) exactly
// (the head width and seed of the default performer model, head_dim 64).
TEST(PerformerTest, ASingleTokenReturnsItsValue) {
  const MixerConfig config = Config(256, 4, true, 20261129);
  const WeightMap weights = RandomWeights(config, 1);
  auto mixer = CreateMixer(config, weights);
  ASSERT_TRUE(mixer.ok()) << mixer.status();
  const at::Tensor x = testing::RandomTensor({8, 1, 256}, 2);
  auto want = PerformerAttentionReference(config, weights, x);
  ASSERT_TRUE(want.ok()) << want.status();
  for (const auto& [path, got] : EveryPath(**mixer, x)) {
    EXPECT_LE(testing::MaxRelativeError(got, *want), 1e-6) << path;
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

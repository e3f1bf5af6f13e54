// The rwkv mixer (kernels/rwkv/): the stable WKV kernel against the two sums in float64 (also
// for keys whose e^k overflows float32, and continued from a state), the whole block against a
// float64 reference from the formulas, and its weights' shapes. (Chunks, steps, StepBatch:
// mixer_contract_test.cc; Hugging Face checkpoints: model_test.cc against
// tests/model/make_reference_models.py's hf_rwkv.)
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <random>

#include "kernels/rwkv/rwkv_block.h"
#include "kernels/rwkv/rwkv_reference.h"
#include "tests/unit/test_util.h"

namespace attnserve::kernels {
namespace {

// Runs the WKV kernel over k, v (B, L, A) from `state` (B, 3, A), which it updates.
at::Tensor RunWkv(const at::Tensor& time_decay, const at::Tensor& time_first, const at::Tensor& k,
                  const at::Tensor& v, at::Tensor& state) {
  return WkvCpu(k.contiguous(), v.contiguous(), (-at::exp(time_decay)).contiguous(),
                time_first.contiguous(), state.data_ptr<float>());
}

at::Tensor FreshWkvState(int64_t batch, int64_t channels) {
  at::Tensor s = at::zeros({batch, 3, channels});
  s.select(1, 2).fill_(-1e38f);
  return s;
}

TEST(RwkvTest, WkvMatchesTheTwoSumsOnRandomShapesAndLargeKeys) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 8; ++trial) {
    const int64_t batch = 1 + rng() % 3, len = 1 + rng() % 90, channels = 1 + rng() % 70;
    // Trial 0..3: keys of order 1; then keys up to ±80, where e^k overflows float32 (> 88 with
    // time_first) and only the running-maximum form stays finite.
    const double key_scale = trial < 4 ? 1.0 : 40.0;
    const at::Tensor decay = testing::RandomTensor({channels}, trial + 1, 1.5);
    const at::Tensor first = testing::RandomTensor({channels}, trial + 2);
    const at::Tensor k = testing::RandomTensor({batch, len, channels}, trial + 3, key_scale);
    const at::Tensor v = testing::RandomTensor({batch, len, channels}, trial + 4);
    at::Tensor state = FreshWkvState(batch, channels);
    const at::Tensor got = RunWkv(decay, first, k, v, state);
    ASSERT_TRUE(at::isfinite(got).all().item<bool>()) << "trial " << trial;
    const at::Tensor want = WkvReference(decay, first, k, v);
    EXPECT_LE((got.to(at::kDouble) - want).abs().max().item<double>(),
              2e-5 * want.abs().max().item<double>())
        << "trial " << trial << " B " << batch << " L " << len << " A " << channels;
  }
}

TEST(RwkvTest, WkvContinuedFromItsStateEqualsOnePass) {
  const int64_t batch = 2, len = 77, channels = 35;
  const at::Tensor decay = testing::RandomTensor({channels}, 1),
                   first = testing::RandomTensor({channels}, 2);
  const at::Tensor k = testing::RandomTensor({batch, len, channels}, 3, 10.0);
  const at::Tensor v = testing::RandomTensor({batch, len, channels}, 4);
  at::Tensor whole_state = FreshWkvState(batch, channels);
  const at::Tensor whole = RunWkv(decay, first, k, v, whole_state);
  at::Tensor state = FreshWkvState(batch, channels);
  std::vector<at::Tensor> pieces;
  for (int64_t pos = 0, n = 1; pos < len; pos += n, n = n * 2 + 1) {
    n = std::min(n, len - pos);
    pieces.push_back(RunWkv(decay, first, k.narrow(1, pos, n), v.narrow(1, pos, n), state));
  }
  // The same recurrence in the same order: bit-identical.
  EXPECT_TRUE(at::equal(at::cat(pieces, 1), whole));
  EXPECT_TRUE(at::equal(state, whole_state));
}

MixerConfig Config(int64_t d_model, int64_t attention_dim, int64_t ffn_dim) {
  MixerConfig c;
  c.kind = MixerKind::kRwkv;
  c.d_model = d_model;
  c.rwkv_attention_dim = attention_dim;
  c.ffn_dim = ffn_dim;
  return c;
}

// Random weights with the norms and the μ's moved off their initial values, so that every
// tensor matters.
WeightMap PerturbedWeights(const MixerConfig& config, uint64_t seed) {
  WeightMap w = RandomWeights(config, seed);
  uint64_t i = seed * 100;
  for (auto& [name, t] : w) {
    if (name.find("ln") == 0 || name.find("time_mix") != std::string::npos) {
      t = t + testing::RandomTensor(t.sizes().vec(), ++i, 0.2);
    }
  }
  return w;
}

TEST(RwkvTest, BlockMatchesTheFloat64ReferenceOnRandomShapes) {
  std::mt19937 rng(9);
  for (int trial = 0; trial < 6; ++trial) {
    const int64_t d_model = 8 * (1 + rng() % 6);
    const int64_t attention_dim = trial % 2 ? 0 : 8 * (1 + rng() % 5);
    const int64_t ffn_dim = trial % 3 ? 0 : 16 * (1 + rng() % 4);
    const int64_t len = 1 + rng() % 60;
    const MixerConfig config = Config(d_model, attention_dim, ffn_dim);
    const WeightMap weights = PerturbedWeights(config, trial);
    auto mixer = CreateMixer(config, weights);
    ASSERT_TRUE(mixer.ok()) << mixer.status();
    const at::Tensor x = testing::RandomTensor({2, len, d_model}, trial + 20);
    auto got = (*mixer)->Prefill(x, nullptr);
    ASSERT_TRUE(got.ok()) << got.status();
    auto want = RwkvBlockReference(config, weights, x);
    ASSERT_TRUE(want.ok()) << want.status();
    EXPECT_LE(testing::MaxRelativeError(*got, *want), 1e-5)
        << "trial " << trial << " H " << d_model << " A " << attention_dim << " F " << ffn_dim
        << " L " << len;
  }
}

TEST(RwkvTest, WeightsAreHuggingFaceShapedAndBadOnesAreRefused) {
  const MixerConfig config = Config(32, 24, 80);
  const std::vector<WeightSpec> specs = ExpectedWeights(config);
  ASSERT_EQ(specs.size(), 18u);
  WeightMap weights = RandomWeights(config, 1);
  EXPECT_EQ(weights.at("attention.time_mix_key").sizes(), at::IntArrayRef({1, 1, 32}));
  EXPECT_EQ(weights.at("attention.key.weight").sizes(), at::IntArrayRef({24, 32}));
  EXPECT_EQ(weights.at("feed_forward.value.weight").sizes(), at::IntArrayRef({32, 80}));
  weights["attention.time_decay"] = at::zeros({25});
  auto mixer = CreateMixer(config, weights);
  ASSERT_FALSE(mixer.ok());
  EXPECT_NE(std::string(mixer.status().message()).find("attention.time_decay"), std::string::npos)
      << mixer.status();
  MixerConfig bidirectional = config;
  bidirectional.causal = false;
  EXPECT_FALSE(ValidateMixerConfig(bidirectional).ok());
}

TEST(RwkvTest, StateIsFixedSizeAndAFreshOneHasHuggingFacesMaximum) {
  const MixerConfig config = Config(40, 0, 0);
  auto mixer = CreateMixer(config, RandomWeights(config, 2));
  ASSERT_TRUE(mixer.ok()) << mixer.status();
  auto state = (*mixer)->InitialState(1);
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->Bytes(), (2 * 40 + 3 * 40) * 4);
  EXPECT_EQ((*mixer)->StateBytesPerSequence(1), (*mixer)->StateBytesPerSequence(1 << 20));
  EXPECT_EQ(state->tensors[1].select(1, 2).max().item<float>(), -1e38f);
  auto y = (*mixer)->Prefill(testing::RandomTensor({1, 300, 40}, 3), &*state);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(state->Bytes(), (2 * 40 + 3 * 40) * 4);
  EXPECT_EQ(state->position, 300);
}

}  // namespace
}  // namespace attnserve::kernels

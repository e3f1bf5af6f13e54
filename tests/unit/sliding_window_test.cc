// The sliding_window mixer (kernels/sliding_window/) and the windowed tiled kernel: against a
// float64 reference written from the formula on random shapes, chunked and stepped against the
// whole pass across the ring's wrap-around, bit-identical to standard attention when the
// window covers the sequence, a state of constant size; the same with attention sinks. (Chunks,
// steps and StepBatch of every streaming mixer: mixer_contract_test.cc.)
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "kernels/sliding_window/sliding_window_attention.h"
#include "kernels/sliding_window/sliding_window_reference.h"
#include "kernels/standard/flash_attention_cpu.h"
#include "tests/unit/test_util.h"

namespace attnserve::kernels {
namespace {

MixerConfig Config(int64_t d_model, int64_t heads, int64_t window, int64_t sinks = 0) {
  MixerConfig c;
  c.kind = MixerKind::kSlidingWindow;
  c.d_model = d_model;
  c.num_heads = heads;
  c.window = window;
  c.sinks = sinks;
  return c;
}

// Windowed causal attention in float64 from the formula (queries are the last Lq of Lk), keys
// 0 .. sinks - 1 visible whatever the window.
at::Tensor NaiveWindowed(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         int64_t window, int64_t sinks = 0) {
  const int64_t lq = q.size(2), lk = k.size(2);
  at::Tensor s = at::matmul(q.to(at::kDouble), k.to(at::kDouble).transpose(-1, -2)) /
                 std::sqrt(static_cast<double>(q.size(3)));
  const at::Tensor pos = at::arange(lq, at::kLong).unsqueeze(1) + (lk - lq);
  const at::Tensor key = at::arange(lk, at::kLong);
  s = s.masked_fill((key > pos).logical_or((key <= pos - window).logical_and(key >= sinks)),
                    -std::numeric_limits<double>::infinity());
  return at::matmul(at::softmax(s, -1), v.to(at::kDouble));
}

TEST(WindowedFlashAttentionTest, MatchesTheFormulaOnRandomShapesAndTiles) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 24; ++trial) {
    const int64_t b = 1 + rng() % 2, h = 1 + rng() % 3, d = 8 * (1 + rng() % 4);
    const int64_t lq = 1 + rng() % 70, lk = lq + rng() % 50, window = 1 + rng() % 80;
    // Half the trials with sinks (some more than the window, some more than the keys).
    const int64_t sinks = trial % 2 ? static_cast<int64_t>(rng() % 40) : 0;
    const FlashAttentionTiles tiles{1 + static_cast<int64_t>(rng() % 33),
                                    1 + static_cast<int64_t>(rng() % 33)};
    const at::Tensor q = testing::RandomTensor({b, h, lq, d}, trial);
    const at::Tensor k = testing::RandomTensor({b, h, lk, d}, trial + 100);
    const at::Tensor v = testing::RandomTensor({b, h, lk, d}, trial + 200);
    auto got = FlashAttentionCpu(q, k, v, /*causal=*/true, tiles, window, sinks);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_LE(testing::MaxRelativeError(*got, NaiveWindowed(q, k, v, window, sinks)), 1e-5)
        << "Lq " << lq << " Lk " << lk << " W " << window << " sinks " << sinks << " tiles "
        << tiles.query << "x" << tiles.key;
  }
  const at::Tensor x = testing::RandomTensor({1, 1, 4, 8}, 1);
  EXPECT_FALSE(FlashAttentionCpu(x, x, x, /*causal=*/false, {}, 2).ok()) << "windows are causal";
  EXPECT_FALSE(FlashAttentionCpu(x, x, x, /*causal=*/true, {}, -1).ok());
}

TEST(SlidingWindowMixerTest, WholeChunkedAndSteppedMatchTheFloat64Reference) {
  std::mt19937 rng(9);
  for (int trial = 0; trial < 6; ++trial) {
    const int64_t heads = 1 + rng() % 4, d_model = heads * 8 * (1 + rng() % 3);
    const int64_t window = 1 + rng() % 50, len = 20 + rng() % 140;
    const int64_t sinks = trial % 2 ? 1 + static_cast<int64_t>(rng() % 12) : 0;
    const MixerConfig config = Config(d_model, heads, window, sinks);
    const WeightMap weights = RandomWeights(config, trial);
    auto mixer = CreateMixer(config, weights);
    ASSERT_TRUE(mixer.ok()) << mixer.status();
    const at::Tensor x = testing::RandomTensor({2, len, d_model}, trial + 7);
    auto want = SlidingWindowAttentionReference(weights, x, heads, window, sinks);
    ASSERT_TRUE(want.ok()) << want.status();
    auto whole = (*mixer)->Prefill(x, nullptr);
    ASSERT_TRUE(whole.ok()) << whole.status();
    EXPECT_LE(testing::MaxRelativeError(*whole, *want), 1e-5)
        << "W " << window << " sinks " << sinks << " L " << len;
    // Chunks of random sizes (some longer than the window), then single steps.
    int64_t position = 0;
    const at::Tensor streamed =
        testing::StreamInChunksThenSteps(**mixer, x, rng, 2 * window + 3, 10, &position);
    ASSERT_TRUE(streamed.defined());
    EXPECT_LE(testing::MaxRelativeError(streamed, *want), 1e-5)
        << "W " << window << " sinks " << sinks;
    EXPECT_EQ(position, len);
  }
}

TEST(SlidingWindowMixerTest, AWindowCoveringTheSequenceIsStandardAttentionBitForBit) {
  MixerConfig standard_config = Config(64, 4, 0);
  standard_config.kind = MixerKind::kStandard;
  const MixerConfig window_config = Config(64, 4, 300);
  const WeightMap weights = RandomWeights(standard_config, 3);
  auto standard = CreateMixer(standard_config, weights);
  auto windowed = CreateMixer(window_config, weights);
  ASSERT_TRUE(standard.ok() && windowed.ok());
  const at::Tensor x = testing::RandomTensor({1, 200, 64}, 4);
  EXPECT_TRUE(at::equal(*(*standard)->Prefill(x, nullptr), *(*windowed)->Prefill(x, nullptr)));
  auto s1 = (*standard)->InitialState(1);
  auto s2 = (*windowed)->InitialState(1);
  for (auto [from, n] : {std::pair<int64_t, int64_t>{0, 70}, {70, 60}}) {
    EXPECT_TRUE(at::equal(*(*standard)->Prefill(x.narrow(1, from, n), &*s1),
                          *(*windowed)->Prefill(x.narrow(1, from, n), &*s2)));
  }
  for (int64_t t = 130; t < 200; ++t) {
    EXPECT_TRUE(at::equal(*(*standard)->Step(x.select(1, t), &*s1),
                          *(*windowed)->Step(x.select(1, t), &*s2)))
        << t;
  }
}

TEST(SlidingWindowMixerTest, ItsStateHasOneSizeWhateverTheLength) {
  const MixerConfig config = Config(64, 4, 16);
  auto mixer = CreateMixer(config, RandomWeights(config, 1));
  EXPECT_EQ((*mixer)->StateBytesPerSequence(1), (*mixer)->StateBytesPerSequence(1 << 20));
  EXPECT_EQ((*mixer)->StateBytesPerSequence(0), 2 * 4 * 16 * 16 * 4);
  auto state = (*mixer)->InitialState(1);
  const int64_t bytes = state->Bytes();
  ASSERT_TRUE((*mixer)->Prefill(testing::RandomTensor({1, 100, 64}, 2), &*state).ok());
  for (int t = 0; t < 40; ++t) {
    ASSERT_TRUE((*mixer)->Step(testing::RandomTensor({1, 64}, t), &*state).ok());
  }
  EXPECT_EQ(state->Bytes(), bytes);
  MixerConfig bad = config;
  bad.window = 0;
  EXPECT_FALSE(ValidateMixerConfig(bad).ok());
  bad = config;
  bad.sinks = -1;
  EXPECT_FALSE(ValidateMixerConfig(bad).ok());
  // Sinks add their own slots: 2·H·(S + W)·d floats, still whatever the length.
  auto with_sinks = CreateMixer(Config(64, 4, 16, 4), RandomWeights(config, 1));
  ASSERT_TRUE(with_sinks.ok());
  EXPECT_EQ((*with_sinks)->StateBytesPerSequence(1 << 20), 2 * 4 * (16 + 4) * 16 * 4);
}

}  // namespace
}  // namespace attnserve::kernels

#include "server/model/model.h"
#include "server/model/model_repository.h"
#include "server/sessions/session_snapshot.h"

namespace attnserve::server {
namespace {

TEST(NewMixersModelTest, AHybridOfThemStreamsAndItsSessionsSnapshotAtAnyLength) {
  v1::ModelConfig config;
  config.set_vocab_size(512);
  config.set_hidden_size(64);
  config.set_num_heads(4);
  config.set_sliding_window(12);
  config.set_state_size(8);
  config.set_conv_kernel(4);
  config.set_expand(2);
  config.set_norm_epsilon(1e-5);
  config.set_max_sequence_length(100000);
  config.set_performer_seed(21);
  for (const char* layer : {"sliding_window", "mamba", "performer"}) config.add_layers(layer);
  auto built = model::Model::Create("swa_hybrid", config, model::Model::RandomWeights(config, 3));
  ASSERT_TRUE(built.ok()) << built.status();
  const model::Model* m = built->get();
  std::vector<std::unique_ptr<model::Model>> models;
  models.push_back(*std::move(built));
  auto repository = model::ModelRepository::FromModels(std::move(models));
  const at::Tensor tokens = at::randint(0, 512, {1, 60}, at::kLong);
  const at::Tensor whole = *m->Forward(tokens, nullptr, model::OutputKind::kAllLogits);
  auto session = std::make_shared<Session>("0123456789abcdef0123456789abcdef", m, absl::Minutes(1),
                                           *m->NewState());
  std::vector<at::Tensor> parts;
  parts.push_back(
      *m->Forward(tokens.narrow(1, 0, 25), &session->state, model::OutputKind::kAllLogits));
  // A snapshot mid-way (the rings are whole, not a growing cache), restored and continued.
  const std::string bytes = EncodeSessionSnapshot(*session);
  EXPECT_LE(static_cast<int64_t>(bytes.size()), m->StateBytesPerSequence(25) + 4096);
  auto restored = DecodeSessionSnapshot(bytes, **repository);
  ASSERT_TRUE(restored.ok()) << restored.status();
  parts.push_back(
      *m->Forward(tokens.narrow(1, 25, 20), &restored->state, model::OutputKind::kAllLogits));
  for (int64_t t = 45; t < 60; ++t) {
    parts.push_back(
        *m->Forward(tokens.narrow(1, t, 1), &restored->state, model::OutputKind::kAllLogits));
  }
  EXPECT_LE(testing::MaxRelativeError(at::cat(parts, 1), whole), 1e-5);
  EXPECT_EQ(m->StateBytesPerSequence(10), m->StateBytesPerSequence(90000));
}

}  // namespace
}  // namespace attnserve::server

// The sparse mixer (kernels/sparse/) and its tiled kernel: against a float64 reference written
// from the patterns' definitions (an explicit mask over the full score matrix) on random
// shapes, strides and tiles, both patterns, causal and not, chunks after a KV prefix; the
// mixer whole, chunked and stepped; equal to standard attention when the pattern covers every
// key (l >= L); a KV-cache state. (Chunks, steps, clones and StepBatch of every streaming
// mixer: mixer_contract_test.cc.)
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "kernels/sparse/sparse_attention.h"
#include "kernels/sparse/sparse_attention_cpu.h"
#include "kernels/sparse/sparse_reference.h"
#include "tests/unit/test_util.h"

namespace attnserve::kernels {
namespace {

MixerConfig Config(int64_t d_model, int64_t heads, const std::string& pattern, int64_t stride,
                   int64_t summary, bool causal = true) {
  MixerConfig c;
  c.kind = MixerKind::kSparse;
  c.d_model = d_model;
  c.num_heads = heads;
  c.sparse_pattern = pattern;
  c.sparse_stride = stride;
  c.sparse_summary = summary;
  c.causal = causal;
  return c;
}

const char* Name(sparse::SparsePatternKind p) { return p == sparse::kFixed ? "fixed" : "strided"; }

TEST(SparseAttentionCpuTest, MatchesTheMaskedFloat64ReferenceOnRandomShapesAndTiles) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 80; ++trial) {
    const auto pattern = trial % 2 ? sparse::kFixed : sparse::kStrided;
    const bool causal = trial % 4 < 3;
    const int64_t b = 1 + rng() % 2, h = 1 + rng() % 3, d = 4 * (1 + rng() % 4);
    const int64_t lk = 1 + rng() % 150;
    // Causal: the queries are the last lq of lk (a chunk after a prefix), sometimes all.
    const int64_t lq = causal && trial % 3 ? 1 + static_cast<int64_t>(rng() % lk) : lk;
    const int64_t stride = 1 + rng() % 24, summary = 1 + rng() % stride;
    SparseAttentionTiles tiles;
    if (trial % 5) {
      tiles = {1 + static_cast<int64_t>(rng() % 40), 1 + static_cast<int64_t>(rng() % 40),
               1 + static_cast<int64_t>(rng() % 12), 1 + static_cast<int64_t>(rng() % 12)};
    }
    const at::Tensor q = testing::RandomTensor({b, h, lk, d}, trial);
    const at::Tensor k = testing::RandomTensor({b, h, lk, d}, trial + 100);
    const at::Tensor v = testing::RandomTensor({b, h, lk, d}, trial + 200);
    auto got = SparseAttentionCpu(q.narrow(2, lk - lq, lq), k, v, causal,
                                  {pattern, stride, summary}, tiles);
    ASSERT_TRUE(got.ok()) << got.status();
    auto want = MaskedSparseAttention(q.to(at::kDouble), k.to(at::kDouble), v.to(at::kDouble),
                                      Name(pattern), stride, summary, causal);
    ASSERT_TRUE(want.ok()) << want.status();
    EXPECT_LE(testing::MaxRelativeError(*got, want->narrow(2, lk - lq, lq)), 1e-5)
        << Name(pattern) << " causal " << causal << " Lq " << lq << " Lk " << lk << " l " << stride
        << " c " << summary << " tiles " << tiles.query << "x" << tiles.key << ", "
        << tiles.long_query << "x" << tiles.long_key;
  }
}

TEST(SparseAttentionCpuTest, RefusesWhatItCannotCompute) {
  const at::Tensor x = testing::RandomTensor({1, 1, 4, 8}, 1);
  EXPECT_FALSE(SparseAttentionCpu(x, x, x, true, {sparse::kStrided, 0, 1}).ok());
  EXPECT_FALSE(SparseAttentionCpu(x, x, x, true, {sparse::kFixed, 4, 5}).ok());
  EXPECT_FALSE(SparseAttentionCpu(x, x, x, true, {sparse::kFixed, 4, 0}).ok());
  EXPECT_FALSE(SparseAttentionCpu(x, x.narrow(2, 0, 3), x.narrow(2, 0, 3), true, {}).ok());
  EXPECT_FALSE(SparseAttentionCpu(x.narrow(2, 0, 3), x, x, false, {}).ok()) << "Lq != Lk";
  EXPECT_FALSE(SparseAttentionCpu(x, x, x, true, {}, {-1, 0, 0, 0}).ok());
}

TEST(SparseMixerTest, WholeChunkedAndSteppedMatchTheFloat64Reference) {
  std::mt19937 rng(9);
  for (int trial = 0; trial < 8; ++trial) {
    const std::string pattern = trial % 2 ? "fixed" : "strided";
    const int64_t heads = 1 + rng() % 4, d_model = heads * 8 * (1 + rng() % 3);
    const int64_t stride = 1 + rng() % 20, summary = 1 + rng() % stride;
    const int64_t len = 20 + rng() % 140;
    const MixerConfig config = Config(d_model, heads, pattern, stride, summary);
    const WeightMap weights = RandomWeights(config, trial);
    auto mixer = CreateMixer(config, weights);
    ASSERT_TRUE(mixer.ok()) << mixer.status();
    const at::Tensor x = testing::RandomTensor({2, len, d_model}, trial + 7);
    auto want = SparseAttentionReference(weights, x, heads, pattern, stride, summary, true);
    ASSERT_TRUE(want.ok()) << want.status();
    auto whole = (*mixer)->Prefill(x, nullptr);
    ASSERT_TRUE(whole.ok()) << whole.status();
    EXPECT_LE(testing::MaxRelativeError(*whole, *want), 1e-5) << pattern << " l " << stride;
    // Chunks of random sizes crossing strides, then single steps.
    int64_t position = 0;
    const at::Tensor streamed =
        testing::StreamInChunksThenSteps(**mixer, x, rng, 2 * stride + 3, 10, &position);
    ASSERT_TRUE(streamed.defined());
    EXPECT_LE(testing::MaxRelativeError(streamed, *want), 1e-5)
        << pattern << " l " << stride << " c " << summary;
    EXPECT_EQ(position, len);
  }
}

TEST(SparseMixerTest, BidirectionalMatchesTheReferenceAndDoesNotStream) {
  for (const std::string pattern : {"strided", "fixed"}) {
    const MixerConfig config = Config(32, 2, pattern, 7, 3, /*causal=*/false);
    const WeightMap weights = RandomWeights(config, 2);
    auto mixer = CreateMixer(config, weights);
    ASSERT_TRUE(mixer.ok()) << mixer.status();
    const at::Tensor x = testing::RandomTensor({1, 61, 32}, 5);
    auto want = SparseAttentionReference(weights, x, 2, pattern, 7, 3, false);
    auto got = (*mixer)->Prefill(x, nullptr);
    ASSERT_TRUE(got.ok() && want.ok());
    EXPECT_LE(testing::MaxRelativeError(*got, *want), 1e-5) << pattern;
    EXPECT_FALSE((*mixer)->can_stream());
    EXPECT_EQ((*mixer)->InitialState(1).status().code(), absl::StatusCode::kFailedPrecondition);
  }
}

TEST(SparseMixerTest, APatternCoveringEveryKeyIsStandardAttention) {
  for (const std::string pattern : {"strided", "fixed"}) {
    for (bool causal : {true, false}) {
      MixerConfig standard_config = Config(64, 4, pattern, 1, 1, causal);
      standard_config.kind = MixerKind::kStandard;
      const WeightMap weights = RandomWeights(standard_config, 3);
      auto standard = CreateMixer(standard_config, weights);
      auto sparse = CreateMixer(Config(64, 4, pattern, 200, 1, causal), weights);
      ASSERT_TRUE(standard.ok() && sparse.ok());
      const at::Tensor x = testing::RandomTensor({1, 200, 64}, 4);
      EXPECT_LE(testing::MaxRelativeError(*(*sparse)->Prefill(x, nullptr),
                                          *(*standard)->Prefill(x, nullptr)),
                1e-6)
          << pattern << " causal " << causal;
      if (!causal) continue;
      auto s1 = (*standard)->InitialState(1);
      auto s2 = (*sparse)->InitialState(1);
      ASSERT_LE(testing::MaxRelativeError(*(*sparse)->Prefill(x.narrow(1, 0, 130), &*s2),
                                          *(*standard)->Prefill(x.narrow(1, 0, 130), &*s1)),
                1e-6);
      for (int64_t t = 130; t < 200; ++t) {
        EXPECT_LE(testing::MaxRelativeError(*(*sparse)->Step(x.select(1, t), &*s2),
                                            *(*standard)->Step(x.select(1, t), &*s1)),
                  1e-6)
            << t;
      }
    }
  }
  // A pattern that does not cover the keys is not standard attention.
  MixerConfig standard_config = Config(64, 4, "strided", 1, 1);
  standard_config.kind = MixerKind::kStandard;
  const WeightMap weights = RandomWeights(standard_config, 3);
  const at::Tensor x = testing::RandomTensor({1, 200, 64}, 4);
  EXPECT_GT(testing::MaxRelativeError(
                *(*CreateMixer(Config(64, 4, "strided", 50, 1), weights))->Prefill(x, nullptr),
                *(*CreateMixer(standard_config, weights))->Prefill(x, nullptr)),
            1e-3);
}

TEST(SparseMixerTest, ItsStateIsAKvCacheAndItsConfigIsChecked) {
  const MixerConfig config = Config(64, 4, "fixed", 16, 4);
  auto mixer = CreateMixer(config, RandomWeights(config, 1));
  ASSERT_TRUE(mixer.ok());
  EXPECT_EQ((*mixer)->StateBytesPerSequence(100), 2 * 4 * 100 * 16 * 4);
  // The step of token 100 reads its block (96 .. 100) and 4 summary columns of 6 blocks.
  EXPECT_EQ((*mixer)->StepKeysRead(100), 5 + 4 * 6);
  for (auto bad : {Config(64, 4, "dilated", 16, 4), Config(64, 4, "strided", 0, 1),
                   Config(64, 4, "fixed", 16, 17), Config(64, 4, "fixed", 16, 0),
                   Config(64, 3, "strided", 16, 1)}) {
    EXPECT_FALSE(ValidateMixerConfig(bad).ok()) << bad.sparse_pattern << " " << bad.sparse_stride;
  }
  EXPECT_TRUE(ValidateMixerConfig(Config(64, 4, "strided", 16, 0)).ok()) << "c is fixed's only";
  EXPECT_EQ(ParseMixerKind("sparse").value(), MixerKind::kSparse);
}

}  // namespace
}  // namespace attnserve::kernels
